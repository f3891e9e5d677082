package kvwire

import (
	"math"
	"slices"
	"time"

	"github.com/sluicehq/sluice/state/kvevents"
)

// DecodeMsgpack decodes one vLLM or SGLang KV-event batch under
// kvevents.DefaultLimits; a failure is a *kvevents.Error.
//
// The batch is an array [ts, events, dp_rank?] or a map {ts, events,
// data_parallel_rank}; each event a tagged positional array (trailing
// defaults may be omitted) or a map with a "type" key; hashes as int64 (cast
// bitwise), uint64 or bin (last 8 bytes, big-endian).
//
// Error policy: a payload that is not well-formed msgpack of the batch shape
// returns a *kvevents.Error (Event -1) and no events. An event that is
// well-formed msgpack but invalid (unknown tag, bad hash, or one that breaks
// a rule of kvevents.Limits.CheckStored or CheckRemoved) is skipped and
// reported in Batch.Skipped; the other events are returned and should be
// applied, so one bad event never discards its neighbours.
//
// Events of every KV-cache group are returned with their Group and
// GroupKind: the index, not the decoder, decides which groups it keeps, so
// that it can learn which groups never describe a prefix. SGLang EAGLE token
// pairs [a, b] contribute their first element: the pairs are overlapping
// bigrams (t[i], t[i+1]), so the first elements are exactly the token
// sequence the request side hashes; the event is marked Lookahead, as is a
// vLLM event with lookahead_token_ids. See docs/kv-events.md.
func DecodeMsgpack(payload []byte) (kvevents.Batch, error) {
	b, err := defaultDecoder.msgpack(payload, nil)
	if err != nil { // a nil *kvevents.Error must not become a non-nil error
		return b, err
	}
	return b, nil
}

// msgpack decodes one engine batch; see DecodeMsgpack. With a non-nil a,
// the batch is built in a's buffers (see Decoder).
func (d *decoder) msgpack(payload []byte, a *arenas) (kvevents.Batch, *kvevents.Error) {
	return d.msgpackChecked(payload, false, a)
}

// msgpackChecked is msgpack, with every event checked for well-formedness
// before it is decoded if checked (decodeState.checked).
func (d *decoder) msgpackChecked(payload []byte, checked bool, a *arenas) (kvevents.Batch, *kvevents.Error) {
	if err := d.lim.CheckPayload(len(payload)); err != nil {
		return kvevents.Batch{}, err
	}
	st := decodeState{lim: &d.lim, r: reader{b: payload}, checked: checked}
	if a != nil {
		st.arenas = a.reset()
	}
	err := st.batch()
	if err == nil && st.r.left() != 0 {
		err = st.r.malformed("trailing bytes after batch")
	}
	if err == nil {
		st.finish()
	}
	if a != nil {
		a.keep(&st.arenas)
	}
	if err != nil {
		return kvevents.Batch{}, err
	}
	return st.out, nil
}

// arenas hold a batch's events and the hashes and token ids they point
// into.
type arenas struct {
	hashes  []uint64
	tokens  []uint32
	stored  []kvevents.BlockStored
	removed []kvevents.BlockRemoved
	spans   []span // per stored/removed entry, indexes into hashes/tokens
	kinds   []kvevents.Kind
	evs     []kvevents.Event
}

// reset returns a's buffers, emptied, for a new batch.
func (a *arenas) reset() arenas {
	clear(a.stored) // drop the last batch's strings for the collector
	return arenas{hashes: a.hashes[:0], tokens: a.tokens[:0], stored: a.stored[:0], removed: a.removed[:0],
		spans: a.spans[:0], kinds: a.kinds[:0], evs: a.evs[:0]}
}

// keepTokens bounds the token ids (and the like for the other buffers) a
// Decoder keeps between records: a rare huge batch (SGLang with page size
// 1 sends one hash per token) should not hold its memory for good.
const keepTokens = 1 << 16

// keep takes b's buffers for the next batch, unless they grew beyond
// keepTokens.
func (a *arenas) keep(b *arenas) {
	*a = *b
	if cap(a.tokens) > keepTokens || cap(a.hashes) > keepTokens {
		a.hashes, a.tokens = nil, nil
	}
	if cap(a.stored)+cap(a.removed) > keepTokens/16 {
		a.stored, a.removed, a.spans, a.kinds, a.evs = nil, nil, nil, nil, nil
	}
}

type decodeState struct {
	lim *kvevents.Limits
	r   reader
	out kvevents.Batch
	arenas

	// checked makes every event be skipped (checking it is well-formed
	// msgpack) before it is decoded, as the decoder did before its one-pass
	// path; the equivalence tests decode both ways.
	checked bool
	// bad records that a read the event decoder does not check for errors
	// (the checked pass has already vouched for the bytes) found malformed
	// or too deeply nested msgpack; the one-pass path then decodes the
	// event again the checked way.
	bad bool
}

type span struct{ h0, h1, t0, t1 int }

func (st *decodeState) batch() *kvevents.Error {
	r := &st.r
	var haveTS, haveEvents bool
	switch {
	case r.isArray():
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n < 2 {
			return r.malformed("batch array shorter than [ts, events]")
		}
		if err := st.ts(); err != nil {
			return err
		}
		if err := st.events(); err != nil {
			return err
		}
		if n >= 3 {
			if err := st.rank(); err != nil {
				return err
			}
		}
		for i := 3; i < n; i++ {
			if err := r.skip(); err != nil {
				return err
			}
		}
		return nil
	case r.isMap():
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		for i := 0; i < n; i++ {
			if !r.isStr() {
				return r.malformed("batch map key is not a string")
			}
			k, _ := r.str()
			switch string(k) {
			case "ts":
				haveTS = true
				err = st.ts()
			case "events":
				haveEvents = true
				err = st.events()
			case "data_parallel_rank", "dp_rank":
				err = st.rank()
			default:
				err = r.skip()
			}
			if err != nil {
				return err
			}
		}
		if !haveTS || !haveEvents {
			return r.malformed("batch map lacks ts or events")
		}
		return nil
	default:
		return r.malformed("batch is neither array nor map")
	}
}

func (st *decodeState) ts() *kvevents.Error {
	if st.r.isNil() {
		return nil
	}
	f, ok := st.r.number()
	if !ok {
		return st.r.malformed("ts is not a number")
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return errf(kvevents.KindBadField, "ts %v out of range", f)
	}
	// A float64 of Unix seconds carries about 0.2 µs of precision today;
	// round to whole microseconds so equal inputs give tidy, equal times.
	sec, frac := math.Modf(f)
	st.out.Time = time.Unix(int64(sec), int64(math.Round(frac*1e6))*1000).UTC()
	return nil
}

func (st *decodeState) rank() *kvevents.Error {
	r := &st.r
	if r.isNil() {
		st.out.HasRank = false
		return nil
	}
	v, neg, ok := r.integer()
	if !ok {
		return r.malformed("dp_rank is not an integer")
	}
	if neg || v > math.MaxInt32 {
		return errf(kvevents.KindBadField, "dp_rank %d out of range", int64(v))
	}
	st.out.DPRank, st.out.HasRank = int32(v), true
	return nil
}

func (st *decodeState) events() *kvevents.Error {
	r := &st.r
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if err := st.lim.CheckEvents(n); err != nil {
		return err
	}
	st.kinds = slices.Grow(st.kinds[:0], n)
	for i := 0; i < n; i++ {
		start := r.off
		nh, nt, ns, nr, nk := len(st.hashes), len(st.tokens), len(st.stored), len(st.removed), len(st.kinds)
		onePass := !st.checked
		if onePass {
			// One pass: decode the event straight from the payload, reading
			// every byte with the checks skip makes. A valid, well-formed
			// event (the common case) ends here. Anything else is decoded
			// again the checked way below, so that a malformed event fails
			// the batch and an invalid one is skipped exactly as before.
			st.bad = false
			if e := st.event(r); e == nil && !st.bad {
				continue
			}
			st.truncate(nh, nt, ns, nr, nk)
			r.off = start
		}
		if err := r.skip(); err != nil {
			return err
		}
		ev := reader{b: r.b[:r.off], off: start}
		st.checked, st.bad = true, false
		e := st.event(&ev)
		st.checked = !onePass
		if e != nil {
			st.truncate(nh, nt, ns, nr, nk)
			e.Event = i
			st.out.Skipped = append(st.out.Skipped, e)
		}
	}
	return nil
}

// truncate drops what a failed event appended to the arenas.
func (st *decodeState) truncate(nh, nt, ns, nr, nk int) {
	st.hashes, st.tokens, st.stored, st.removed = st.hashes[:nh], st.tokens[:nt], st.stored[:ns], st.removed[:nr]
	st.spans, st.kinds = st.spans[:ns+nr], st.kinds[:nk]
}

// finish builds Events once the arenas no longer move.
func (st *decodeState) finish() {
	if len(st.kinds) == 0 {
		return
	}
	st.evs = slices.Grow(st.evs[:0], len(st.kinds))[:len(st.kinds)]
	st.out.Events = st.evs
	si, ri, sp := 0, 0, 0
	for i, k := range st.kinds {
		ev := kvevents.Event{Kind: k}
		switch k {
		case kvevents.KindBlockStored:
			s := &st.stored[si]
			p := st.spans[sp]
			s.BlockHashes = st.hashes[p.h0:p.h1:p.h1]
			if p.t1 > p.t0 { // a Sparse event has none
				s.TokenIDs = st.tokens[p.t0:p.t1:p.t1]
			}
			ev.Stored = s
			si++
			sp++
		case kvevents.KindBlockRemoved:
			rm := &st.removed[ri]
			p := st.spans[sp]
			rm.BlockHashes = st.hashes[p.h0:p.h1:p.h1]
			ev.Removed = rm
			ri++
			sp++
		}
		st.out.Events[i] = ev
	}
}

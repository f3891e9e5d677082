package kvevents

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
)

// Limits bounds what one batch may contain; anything larger is rejected as
// KindAbsurdSize before memory is committed to it.
//
// The payload bound is what bounds memory: every hash and token id takes at
// least one payload byte, and the decoder keeps 8 bytes per hash and 4 per
// token, so one Decode holds at most about 12 × MaxPayloadBytes of arrays
// (the Kafka record, and the fetch size, bound the payload before that).
// The per-event counts only catch nonsense; they sit far above real events:
// SGLang with page size 1 sends a long prompt as one event with one hash
// per token (docs/kv-events.md).
type Limits struct {
	// MaxPayloadBytes bounds the whole msgpack payload.
	MaxPayloadBytes int
	// MaxEventsPerBatch bounds the number of events in one batch.
	MaxEventsPerBatch int
	// MaxHashesPerEvent bounds the blocks one event may report.
	MaxHashesPerEvent int
	// MaxTokensPerEvent bounds the token ids one BlockStored may carry.
	MaxTokensPerEvent int
}

// DefaultMaxPayloadBytes is DefaultLimits' payload bound: 16 MiB, the
// ingestion service's default fetch size.
const DefaultMaxPayloadBytes = 16 << 20

// DefaultLimits returns limits far above anything a real engine sends: a
// page-size-1 prompt of 4M tokens fits (as far as the payload bound allows).
func DefaultLimits() Limits {
	return Limits{
		MaxPayloadBytes:   DefaultMaxPayloadBytes,
		MaxEventsPerBatch: 100_000,
		MaxHashesPerEvent: 1 << 22,
		MaxTokensPerEvent: 1 << 22,
	}
}

// Validate reports a limit that is not positive.
func (l Limits) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
	}{
		{"MaxPayloadBytes", l.MaxPayloadBytes},
		{"MaxEventsPerBatch", l.MaxEventsPerBatch},
		{"MaxHashesPerEvent", l.MaxHashesPerEvent},
		{"MaxTokensPerEvent", l.MaxTokensPerEvent},
	} {
		if f.v <= 0 {
			errs = append(errs, fmt.Errorf("kvevents.Limits.%s = %d: must be positive (DefaultLimits has sane values)", f.name, f.v))
		}
	}
	return errors.Join(errs...)
}

// Decoder decodes engine msgpack batches under a set of Limits. It holds no
// mutable state and is safe for concurrent use.
type Decoder struct {
	limits Limits
}

// NewDecoder returns a decoder enforcing l.
func NewDecoder(l Limits) (*Decoder, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Decoder{limits: l}, nil
}

var defaultDecoder = &Decoder{limits: DefaultLimits()}

// DecodeMsgpack decodes one vLLM or SGLang KV-event batch under
// DefaultLimits. See Decoder.Decode.
func DecodeMsgpack(payload []byte) (Batch, error) { return defaultDecoder.Decode(payload) }

// Decode decodes one KV-event batch as vLLM and SGLang publish it: an array
// [ts, events, dp_rank?] or a map {ts, events, data_parallel_rank}; each
// event a tagged positional array (trailing defaults may be omitted) or a
// map with a "type" key; hashes as int64 (cast bitwise), uint64 or bin (last
// 8 bytes, big-endian).
//
// Error policy: a payload that is not well-formed msgpack of the batch shape
// returns a *Error (Event -1) and no events. An event that is well-formed
// msgpack but invalid (unknown tag, bad hash, token count that does not
// match block_size × hashes, size beyond Limits, …) is skipped and reported
// in Batch.Skipped; the other events are returned and should be applied, so
// one bad event never discards its neighbours.
//
// Events of every KV-cache group are returned with their Group and
// GroupKind: the index, not the decoder, decides which groups it keeps, so
// that it can learn which groups never describe a prefix. A group event
// whose token count does not line up (a sliding-window group skipping null
// blocks) is returned as Sparse, not as an error. SGLang EAGLE token pairs
// [a, b] contribute their first element: the pairs are overlapping bigrams
// (t[i], t[i+1]), so the first elements are exactly the token sequence the
// request side hashes; the event is marked Lookahead, as is a vLLM event
// with lookahead_token_ids. See docs/kv-events.md.
func (d *Decoder) Decode(payload []byte) (Batch, error) {
	if len(payload) > d.limits.MaxPayloadBytes {
		return Batch{}, errf(KindAbsurdSize, "payload of %d bytes exceeds %d", len(payload), d.limits.MaxPayloadBytes)
	}
	st := decodeState{lim: &d.limits, r: reader{b: payload}}
	if err := st.batch(); err != nil {
		return Batch{}, err
	}
	if st.r.left() != 0 {
		return Batch{}, st.r.malformed("trailing bytes after batch")
	}
	st.finish()
	return st.out, nil
}

type decodeState struct {
	lim *Limits
	r   reader
	out Batch

	hashes  []uint64
	tokens  []uint32
	stored  []BlockStored
	removed []BlockRemoved
	spans   []span // per stored/removed entry, indexes into hashes/tokens
	kinds   []Kind
}

type span struct{ h0, h1, t0, t1 int }

func (st *decodeState) batch() *Error {
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

func (st *decodeState) ts() *Error {
	if st.r.isNil() {
		return nil
	}
	f, ok := st.r.number()
	if !ok {
		return st.r.malformed("ts is not a number")
	}
	if math.IsNaN(f) || math.IsInf(f, 0) || f < 0 || f > 1<<40 {
		return errf(KindBadField, "ts %v out of range", f)
	}
	// A float64 of Unix seconds carries about 0.2 µs of precision today;
	// round to whole microseconds so equal inputs give tidy, equal times.
	sec, frac := math.Modf(f)
	st.out.Time = time.Unix(int64(sec), int64(math.Round(frac*1e6))*1000).UTC()
	return nil
}

func (st *decodeState) rank() *Error {
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
		return errf(KindBadField, "dp_rank %d out of range", int64(v))
	}
	st.out.DPRank, st.out.HasRank = int32(v), true
	return nil
}

func (st *decodeState) events() *Error {
	r := &st.r
	n, err := r.arrayLen()
	if err != nil {
		return err
	}
	if n > st.lim.MaxEventsPerBatch {
		return errf(KindAbsurdSize, "%d events exceed %d per batch", n, st.lim.MaxEventsPerBatch)
	}
	st.kinds = make([]Kind, 0, n)
	for i := 0; i < n; i++ {
		start := r.off
		if err := r.skip(); err != nil {
			return err
		}
		ev := reader{b: r.b[:r.off], off: start}
		nh, nt, ns, nr := len(st.hashes), len(st.tokens), len(st.stored), len(st.removed)
		if e := st.event(&ev); e != nil {
			st.hashes, st.tokens, st.stored, st.removed = st.hashes[:nh], st.tokens[:nt], st.stored[:ns], st.removed[:nr]
			st.spans = st.spans[:ns+nr]
			e.Event = i
			st.out.Skipped = append(st.out.Skipped, e)
		}
	}
	return nil
}

// finish builds Events once the arenas no longer move.
func (st *decodeState) finish() {
	if len(st.kinds) == 0 {
		return
	}
	st.out.Events = make([]Event, len(st.kinds))
	si, ri, sp := 0, 0, 0
	for i, k := range st.kinds {
		ev := Event{Kind: k}
		switch k {
		case KindBlockStored:
			s := &st.stored[si]
			p := st.spans[sp]
			s.BlockHashes = st.hashes[p.h0:p.h1:p.h1]
			if p.t1 > p.t0 { // a Sparse event has none
				s.TokenIDs = st.tokens[p.t0:p.t1:p.t1]
			}
			ev.Stored = s
			si++
			sp++
		case KindBlockRemoved:
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

// Field identities shared by the positional and map forms.
type field uint8

const (
	fSkip field = iota
	fHashes
	fParent
	fTokens
	fBlockSize
	fLoRAID
	fMedium
	fLoRANameOrMeta
	fExtraKeys
	fSpecKind
	fMetadata
	fCacheSalt
	fGroup
	fLookahead
)

var storedPositional = [...]field{fSkip, fHashes, fParent, fTokens, fBlockSize, fLoRAID, fMedium, fLoRANameOrMeta, fExtraKeys, fGroup, fSpecKind}

var removedPositional = [...]field{fSkip, fHashes, fMedium, fGroup}

func mapField(k []byte) field {
	switch string(k) {
	case "block_hashes":
		return fHashes
	case "parent_block_hash":
		return fParent
	case "token_ids":
		return fTokens
	case "block_size":
		return fBlockSize
	case "lora_id":
		return fLoRAID
	case "medium":
		return fMedium
	case "lora_name":
		return fLoRANameOrMeta
	case "extra_keys":
		return fExtraKeys
	case "kv_cache_spec_kind":
		return fSpecKind
	case "metadata":
		return fMetadata
	case "cache_salt":
		return fCacheSalt
	case "group_idx":
		return fGroup
	case "lookahead_token_ids":
		return fLookahead
	}
	return fSkip
}

// evFields collects one event's fields before validation.
type evFields struct {
	h0, h1, t0, t1 int
	hasHashes      bool
	hasTokens      bool
	parent         uint64
	hasParent      bool
	blockSize      int64
	hasBlockSize   bool
	loraName       []byte
	loraID         int64
	hasLoRAID      bool
	medium         Medium
	hasMedium      bool
	extra          []string
	salt           []byte
	group          int32
	hasGroup       bool
	kind           GroupKind
	lookahead      bool
}

// event decodes one event (already known to be well-formed msgpack) and
// appends it to the arenas.
func (st *decodeState) event(r *reader) *Error {
	var tag []byte
	var f evFields
	switch {
	case r.isArray():
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n == 0 || !r.isStr() {
			return errf(KindMalformed, "event array does not start with a tag")
		}
		tag, _ = r.str()
		var layout []field
		switch string(tag) {
		case "BlockStored":
			layout = storedPositional[:]
		case "BlockRemoved":
			layout = removedPositional[:]
		case "AllBlocksCleared":
		default:
			return errf(KindUnknownEventTag, "tag %.64q", tag)
		}
		for i := 1; i < n; i++ {
			fid := fSkip
			if i < len(layout) {
				fid = layout[i]
			}
			if err := st.field(r, fid, &f); err != nil {
				return err
			}
		}
	case r.isMap():
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		body := r.off
		for i := 0; i < n; i++ {
			if !r.isStr() {
				return errf(KindMalformed, "event map key is not a string")
			}
			k, _ := r.str()
			if string(k) == "type" && r.isStr() {
				tag, _ = r.str()
				continue
			}
			_ = r.skip()
		}
		switch string(tag) {
		case "BlockStored", "BlockRemoved", "AllBlocksCleared":
		case "":
			return errf(KindUnknownEventTag, "event map without a string \"type\"")
		default:
			return errf(KindUnknownEventTag, "tag %.64q", tag)
		}
		r.off = body
		for i := 0; i < n; i++ {
			k, _ := r.str()
			if err := st.field(r, mapField(k), &f); err != nil {
				return err
			}
		}
	default:
		return errf(KindMalformed, "event is neither array nor map")
	}
	switch string(tag) {
	case "BlockStored":
		return st.finishStored(&f)
	case "BlockRemoved":
		if !f.hasHashes {
			return errf(KindBadField, "BlockRemoved without block_hashes")
		}
		st.removed = append(st.removed, BlockRemoved{Medium: f.medium, AllTiers: !f.hasMedium, Group: f.group})
		st.spans = append(st.spans, span{h0: f.h0, h1: f.h1})
		st.kinds = append(st.kinds, KindBlockRemoved)
	default:
		st.kinds = append(st.kinds, KindAllBlocksCleared)
	}
	return nil
}

func (st *decodeState) finishStored(f *evFields) *Error {
	if !f.hasHashes || !f.hasTokens || !f.hasBlockSize {
		return errf(KindBadField, "BlockStored lacks block_hashes, token_ids or block_size")
	}
	nh, nt := f.h1-f.h0, f.t1-f.t0
	if nh == 0 {
		return errf(KindBadField, "BlockStored with no block hashes")
	}
	if f.blockSize <= 0 || f.blockSize > int64(st.lim.MaxTokensPerEvent) {
		return errf(KindBadField, "block_size %d out of range", f.blockSize)
	}
	bs := int(f.blockSize)
	sparse := false
	switch {
	case nt == bs*nh:
	case nh == 1 && nt > 0 && nt < bs:
		// SGLang short last page reported with the full page size (never
		// read as sparse: a group skipping null blocks has more tokens
		// than its hashes cover, not fewer).
		bs = nt
	case f.hasGroup || !f.kind.PrefixGroup():
		// A group that skipped (null) blocks: valid, but not a prefix.
		sparse = true
		f.t1 = f.t0
		st.tokens = st.tokens[:f.t0]
	default:
		return errf(KindTokenCountMismatch, "%d token ids for %d blocks of %d", nt, nh, bs)
	}
	if f.extra != nil && len(f.extra) != nh {
		return errf(KindBadField, "%d extra_keys entries for %d blocks", len(f.extra), nh)
	}
	lora := string(f.loraName)
	if lora == "" && f.hasLoRAID {
		lora = "#" + strconv.FormatInt(f.loraID, 10)
	}
	salt := string(f.salt)
	extra := f.extra
	if extra != nil {
		extra, salt = namespaceExtraKeys(extra, f, salt)
	}
	st.stored = append(st.stored, BlockStored{
		ParentHash: f.parent,
		HasParent:  f.hasParent,
		BlockSize:  bs,
		LoRAName:   lora,
		Medium:     f.medium,
		ExtraKeys:  extra,
		CacheSalt:  salt,
		Group:      f.group,
		GroupKind:  f.kind,
		Sparse:     sparse,
		Lookahead:  f.lookahead,
	})
	st.spans = append(st.spans, span{h0: f.h0, h1: f.h1, t0: f.t0, t1: f.t1})
	st.kinds = append(st.kinds, KindBlockStored)
	return nil
}

func (st *decodeState) field(r *reader, fid field, f *evFields) *Error {
	switch fid {
	case fHashes:
		n, err := r.arrayLen()
		if err != nil {
			return errf(KindBadField, "block_hashes is not an array")
		}
		if n > st.lim.MaxHashesPerEvent {
			return errf(KindAbsurdSize, "%d block hashes exceed %d", n, st.lim.MaxHashesPerEvent)
		}
		f.h0 = len(st.hashes)
		for i := 0; i < n; i++ {
			h, err := hash(r)
			if err != nil {
				return err
			}
			st.hashes = append(st.hashes, h)
		}
		f.h1, f.hasHashes = len(st.hashes), true
	case fParent:
		if r.isNil() {
			return nil
		}
		h, err := hash(r)
		if err != nil {
			return err
		}
		f.parent, f.hasParent = h, true
	case fTokens:
		n, err := r.arrayLen()
		if err != nil {
			return errf(KindBadField, "token_ids is not an array")
		}
		if n > st.lim.MaxTokensPerEvent {
			return errf(KindAbsurdSize, "%d token ids exceed %d", n, st.lim.MaxTokensPerEvent)
		}
		f.t0 = len(st.tokens)
		for i := 0; i < n; i++ {
			t, pair, err := token(r)
			if err != nil {
				return err
			}
			f.lookahead = f.lookahead || pair
			st.tokens = append(st.tokens, t)
		}
		f.t1, f.hasTokens = len(st.tokens), true
	case fBlockSize:
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxInt32 {
			return errf(KindBadField, "block_size is not a positive integer")
		}
		f.blockSize, f.hasBlockSize = int64(v), true
	case fLoRAID:
		if r.isNil() {
			return nil
		}
		v, _, ok := r.integer()
		if !ok {
			return errf(KindBadField, "lora_id is not an integer")
		}
		f.loraID, f.hasLoRAID = int64(v), true
	case fMedium:
		if r.isNil() {
			return nil
		}
		if !r.isStr() {
			return errf(KindBadField, "medium is not a string")
		}
		s, _ := r.str()
		f.medium, f.hasMedium = ParseMedium(string(s)), true
	case fLoRANameOrMeta:
		if r.isMap() { // SGLang's 7th positional field
			return st.metadata(r, f)
		}
		if r.isNil() {
			return nil
		}
		if !r.isStr() {
			return errf(KindBadField, "lora_name is not a string")
		}
		f.loraName, _ = r.str()
	case fMetadata:
		if r.isNil() {
			return nil
		}
		if !r.isMap() {
			return errf(KindBadField, "metadata is not a map")
		}
		return st.metadata(r, f)
	case fCacheSalt:
		return cacheSalt(r, f)
	case fExtraKeys:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return errf(KindBadField, "extra_keys is not an array")
		}
		var keys []string
		for i := 0; i < n; i++ {
			if r.isNil() {
				if keys != nil {
					keys = append(keys, "")
				}
				continue
			}
			start := r.off
			_ = r.skip()
			if keys == nil {
				keys = make([]string, i, n)
			}
			keys = append(keys, string(r.b[start:r.off]))
		}
		if keys != nil {
			f.extra = keys
		} else if n > 0 {
			f.extra = nil
		}
	case fSpecKind:
		if r.isNil() {
			return nil
		}
		if !r.isStr() {
			return errf(KindBadField, "kv_cache_spec_kind is not a string")
		}
		s, _ := r.str()
		f.kind = groupKind(s)
	case fGroup:
		if r.isNil() {
			return nil
		}
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxInt32 {
			return errf(KindBadField, "group_idx is not an integer in [0, 2^31)")
		}
		f.group, f.hasGroup = int32(v), true
	case fLookahead:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return errf(KindBadField, "lookahead_token_ids is not an array")
		}
		for i := 0; i < n; i++ {
			_ = r.skip()
		}
		f.lookahead = f.lookahead || n > 0
	default:
		return r.skip()
	}
	return nil
}

// groupKind classifies a kv_cache_spec_kind string. Kinds not known to be
// windowed or state-space are taken as full attention variants (MLA and the
// like).
func groupKind(kind []byte) GroupKind {
	k := bytes.ToLower(kind)
	switch {
	case bytes.Contains(k, []byte("sliding")) || bytes.Contains(k, []byte("local")) || bytes.Contains(k, []byte("window")):
		return GroupKindWindowed
	case bytes.Contains(k, []byte("mamba")) || bytes.Contains(k, []byte("state")) || bytes.Contains(k, []byte("linear")):
		return GroupKindState
	default:
		return GroupKindFull
	}
}

// namespaceExtraKeys removes from vLLM's per-block extra keys what sluice
// expresses as a namespace instead, and returns the remaining keys (nil
// when none is left) and the cache salt. vLLM builds a block's extra keys
// as (multimodal keys…, LoRA name, cache salt on the first block of a
// request, prompt-embedding hash): elements equal to the event's lora_name
// (or lora_id) go; on the first block of a chain (no parent), a single
// string left over is the cache salt — if it is really a multimodal hash,
// reading it as a salt still keeps the blocks away from every request that
// lacks it. Whatever else is left makes its block unmatchable by a request
// that has no extra keys, which Decide cannot express.
func namespaceExtraKeys(extra []string, f *evFields, salt string) ([]string, string) {
	var out []string
	for i, raw := range extra {
		if raw == "" {
			continue
		}
		keep := keptExtraElems(raw, f)
		if i == 0 && !f.hasParent && len(keep) == 1 {
			r := reader{b: keep[0]}
			if r.isStr() {
				s, _ := r.str()
				if salt == "" {
					salt = string(s)
				}
				if salt == string(s) {
					keep = nil
				}
			}
		}
		if len(keep) == 0 {
			continue
		}
		if out == nil {
			out = make([]string, len(extra))
		}
		out[i] = encodeElems(keep)
	}
	return out, salt
}

// keptExtraElems splits one block's raw extra keys (a msgpack array, or a
// single value) into element encodings, minus the adapter's name or id.
func keptExtraElems(raw string, f *evFields) [][]byte {
	r := reader{b: []byte(raw)}
	n := 1
	if r.isArray() {
		n, _ = r.arrayLen()
	}
	var keep [][]byte
	for j := 0; j < n; j++ {
		start := r.off
		if err := r.skip(); err != nil {
			break
		}
		elem := r.b[start:r.off]
		er := reader{b: elem}
		switch {
		case len(f.loraName) > 0 && er.isStr():
			if s, _ := er.str(); string(s) == string(f.loraName) {
				continue
			}
		case f.hasLoRAID && er.isInt():
			if v, _, _ := er.integer(); int64(v) == f.loraID {
				continue
			}
		}
		keep = append(keep, elem)
	}
	return keep
}

// encodeElems encodes elements as one msgpack array, so a block's extra
// keys that lost nothing keep their wire encoding.
func encodeElems(elems [][]byte) string {
	var b []byte
	switch n := len(elems); {
	case n < 16:
		b = append(b, 0x90|byte(n))
	default:
		b = append(b, 0xdc, byte(n>>8), byte(n))
	}
	for _, e := range elems {
		b = append(b, e...)
	}
	return string(b)
}

func (st *decodeState) metadata(r *reader, f *evFields) *Error {
	n, err := r.mapLen()
	if err != nil {
		return errf(KindBadField, "metadata is not a map")
	}
	for i := 0; i < n; i++ {
		if !r.isStr() {
			return errf(KindBadField, "metadata key is not a string")
		}
		k, _ := r.str()
		if string(k) == "cache_salt" {
			if err := cacheSalt(r, f); err != nil {
				return err
			}
			continue
		}
		_ = r.skip()
	}
	return nil
}

func cacheSalt(r *reader, f *evFields) *Error {
	if r.isNil() {
		return nil
	}
	if !r.isStr() {
		return errf(KindBadField, "cache_salt is not a string")
	}
	f.salt, _ = r.str()
	return nil
}

// hash reads one engine block hash: an integer (negative int64 cast
// bitwise) or a bin whose last 8 bytes are read big-endian.
func hash(r *reader) (uint64, *Error) {
	if r.isInt() {
		v, _, _ := r.integer()
		return v, nil
	}
	c, _ := r.peek()
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		b, _ := r.str()
		if len(b) < 8 {
			return 0, errf(KindBadHash, "bin hash of %d bytes, want at least 8", len(b))
		}
		b = b[len(b)-8:]
		return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]), nil
	}
	return 0, errf(KindBadHash, "hash of msgpack type 0x%02x", c)
}

// token reads one token id, or the first of an SGLang EAGLE bigram
// [t[i], t[i+1]] (pair reports which).
func token(r *reader) (t uint32, pair bool, err *Error) {
	if r.isArray() {
		n, _ := r.arrayLen()
		if n == 0 {
			return 0, false, errf(KindBadToken, "empty token pair")
		}
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxUint32 {
			return 0, false, errf(KindBadToken, "token pair element is not a uint32")
		}
		for i := 1; i < n; i++ {
			_ = r.skip()
		}
		return uint32(v), true, nil
	}
	v, neg, ok := r.integer()
	if !ok || neg || v > math.MaxUint32 {
		return 0, false, errf(KindBadToken, "token id is not a uint32")
	}
	return uint32(v), false, nil
}

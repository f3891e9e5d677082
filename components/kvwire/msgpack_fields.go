package kvwire

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"github.com/sluicehq/sluice/state/kvevents"
)

// This file reads one event's fields, positional or map form (the field schema of
// docs/wire-formats.md, "msgpack KV batches"); msgpack_batch.go reads the batch around them and
// msgpack_namespace.go turns vLLM's extra keys into a namespace.

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
	medium         kvevents.Medium
	hasMedium      bool
	extra          []string
	salt           []byte
	group          int32
	hasGroup       bool
	kind           kvevents.GroupKind
	lookahead      bool
}

// Depths of an event's values, as skip counts them from the event (0): its
// fields and map keys are at 1, their elements at 2, a token pair's at 3.
const (
	depthField = 1 + iota
	depthElem
	depthPairElem
)

// event decodes one event and appends it to the arenas. Reads whose errors
// it does not return set st.bad instead (see decodeState.bad); so does a
// second "type" key after a first one, whose tag the one-pass path already
// took.
func (st *decodeState) event(r *reader) *kvevents.Error {
	var tag []byte
	var f evFields
	switch {
	case r.isArray():
		n, err := r.arrayLen()
		if err != nil {
			return err
		}
		if n == 0 || !r.isStr() {
			return errf(kvevents.KindMalformed, "event array does not start with a tag")
		}
		tag = st.str(r)
		var layout []field
		switch string(tag) {
		case "BlockStored":
			layout = storedPositional[:]
		case "BlockRemoved":
			layout = removedPositional[:]
		case "AllBlocksCleared":
		default:
			return errf(kvevents.KindUnknownEventTag, "tag %.64q", tag)
		}
		for i := 1; i < n; i++ {
			fid := fSkip
			if i < len(layout) {
				fid = layout[i]
			}
			if err := st.field(r, fid, &f); err != nil || st.bad {
				return err
			}
		}
	case r.isMap():
		n, err := r.mapLen()
		if err != nil {
			return err
		}
		body := r.off
		// The engines (msgspec) write the tag first: then the fields are
		// decoded in the same pass, and a later "type" key (which the scan
		// below would let win) sends the event to the checked path.
		first := 0
		if !st.checked && n > 0 && r.isStr() {
			if k := st.str(r); string(k) == "type" && r.isStr() {
				tag, first = st.str(r), 1
			} else {
				r.off = body
			}
		}
		if first == 0 {
			for i := 0; i < n; i++ {
				if !r.isStr() {
					return errf(kvevents.KindMalformed, "event map key is not a string")
				}
				k := st.str(r)
				if string(k) == "type" && r.isStr() {
					tag = st.str(r)
					continue
				}
				st.skip(r, depthField)
			}
			if st.bad {
				return nil
			}
			r.off = body
		}
		switch string(tag) {
		case "BlockStored", "BlockRemoved", "AllBlocksCleared":
		case "":
			return errf(kvevents.KindUnknownEventTag, "event map without a string \"type\"")
		default:
			return errf(kvevents.KindUnknownEventTag, "tag %.64q", tag)
		}
		for i := first; i < n; i++ {
			if !r.isStr() {
				st.bad = true
				return nil
			}
			k := st.str(r)
			if first == 1 && string(k) == "type" {
				st.bad = true
				return nil
			}
			if err := st.field(r, mapField(k), &f); err != nil || st.bad {
				return err
			}
		}
	default:
		return errf(kvevents.KindMalformed, "event is neither array nor map")
	}
	switch string(tag) {
	case "BlockStored":
		return st.finishStored(&f)
	case "BlockRemoved":
		if !f.hasHashes {
			return errf(kvevents.KindBadField, "BlockRemoved without block_hashes")
		}
		rm := kvevents.BlockRemoved{BlockHashes: st.hashes[f.h0:f.h1], Medium: f.medium, AllTiers: !f.hasMedium, Group: f.group}
		if err := st.lim.CheckRemoved(&rm); err != nil {
			return err
		}
		rm.BlockHashes = nil // finish points it into the arena once it stops moving
		st.removed = append(st.removed, rm)
		st.spans = append(st.spans, span{h0: f.h0, h1: f.h1})
		st.kinds = append(st.kinds, kvevents.KindBlockRemoved)
	default:
		st.kinds = append(st.kinds, kvevents.KindAllBlocksCleared)
	}
	return nil
}

func (st *decodeState) finishStored(f *evFields) *kvevents.Error {
	if !f.hasHashes || !f.hasTokens || !f.hasBlockSize {
		return errf(kvevents.KindBadField, "BlockStored lacks block_hashes, token_ids or block_size")
	}
	s := kvevents.BlockStored{
		BlockHashes: st.hashes[f.h0:f.h1],
		TokenIDs:    st.tokens[f.t0:f.t1],
		BlockSize:   int(f.blockSize),
		ExtraKeys:   f.extra,
		GroupKind:   f.kind,
	}
	if err := st.lim.CheckStored(&s, f.hasGroup); err != nil {
		return err
	}
	if s.Sparse {
		f.t1 = f.t0
		st.tokens = st.tokens[:f.t0]
	}
	lora := string(f.loraName)
	if lora == "" && f.hasLoRAID {
		lora = "#" + strconv.FormatInt(f.loraID, 10)
	}
	salt := string(f.salt)
	extra := s.ExtraKeys
	if extra != nil {
		extra, salt = namespaceExtraKeys(extra, f, salt)
	}
	st.stored = append(st.stored, kvevents.BlockStored{
		ParentHash: f.parent,
		HasParent:  f.hasParent,
		BlockSize:  s.BlockSize,
		LoRAName:   lora,
		Medium:     f.medium,
		ExtraKeys:  extra,
		CacheSalt:  salt,
		Group:      f.group,
		GroupKind:  f.kind,
		Sparse:     s.Sparse,
		Lookahead:  f.lookahead,
	})
	st.spans = append(st.spans, span{h0: f.h0, h1: f.h1, t0: f.t0, t1: f.t1})
	st.kinds = append(st.kinds, kvevents.KindBlockStored)
	return nil
}

func (st *decodeState) field(r *reader, fid field, f *evFields) *kvevents.Error {
	switch fid {
	case fHashes:
		n, err := r.arrayLen()
		if err != nil {
			return errf(kvevents.KindBadField, "block_hashes is not an array")
		}
		if err := st.lim.CheckHashes(n); err != nil {
			return err
		}
		f.h0 = len(st.hashes)
		st.hashes = slices.Grow(st.hashes, n)
		hs := st.hashes[f.h0 : f.h0+n]
		// Into the arena's spare room, in locals the compiler can keep in
		// registers: the engines' own widths (SGLang's int64, vLLM's
		// uint64) inline, anything else through hash.
		b, off := r.b, r.off
		for i := range hs {
			if off+9 <= len(b) && (b[off] == 0xd3 || b[off] == 0xcf) {
				hs[i] = binary.BigEndian.Uint64(b[off+1 : off+9])
				off += 9
				continue
			}
			r.off = off
			h, err := hash(r)
			if err != nil {
				return err
			}
			hs[i], off = h, r.off
		}
		r.off = off
		st.hashes = st.hashes[:f.h0+n]
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
			return errf(kvevents.KindBadField, "token_ids is not an array")
		}
		if err := st.lim.CheckTokens(n); err != nil {
			return err
		}
		f.t0 = len(st.tokens)
		st.tokens = slices.Grow(st.tokens, n)
		ts := st.tokens[f.t0 : f.t0+n]
		// As the hashes: plain token ids (uint8 to uint32, the widths
		// msgpack picks for ids below 2^32) inline; anything else, pairs
		// included, through token.
		b, off := r.b, r.off
		for i := range ts {
			if off < len(b) {
				switch c := b[off]; {
				case c <= 0x7f:
					ts[i] = uint32(c)
					off++
					continue
				case c == 0xcd && off+3 <= len(b):
					ts[i] = uint32(binary.BigEndian.Uint16(b[off+1 : off+3]))
					off += 3
					continue
				case c == 0xce && off+5 <= len(b):
					ts[i] = binary.BigEndian.Uint32(b[off+1 : off+5])
					off += 5
					continue
				case c == 0xcc && off+2 <= len(b):
					ts[i] = uint32(b[off+1])
					off += 2
					continue
				}
			}
			r.off = off
			t, pair, err := token(r)
			if err != nil {
				return err
			}
			f.lookahead = f.lookahead || pair
			ts[i], off = t, r.off
		}
		r.off = off
		st.tokens = st.tokens[:f.t0+n]
		f.t1, f.hasTokens = len(st.tokens), true
	case fBlockSize:
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxInt32 {
			return errf(kvevents.KindBadField, "block_size is not a positive integer")
		}
		f.blockSize, f.hasBlockSize = int64(v), true
	case fLoRAID:
		if r.isNil() {
			return nil
		}
		v, _, ok := r.integer()
		if !ok {
			return errf(kvevents.KindBadField, "lora_id is not an integer")
		}
		f.loraID, f.hasLoRAID = int64(v), true
	case fMedium:
		if r.isNil() {
			return nil
		}
		if !r.isStr() {
			return errf(kvevents.KindBadField, "medium is not a string")
		}
		s := st.str(r)
		f.medium, f.hasMedium = kvevents.ParseMedium(string(s)), true
	case fLoRANameOrMeta:
		if r.isMap() { // SGLang's 7th positional field
			return st.metadata(r, f)
		}
		if r.isNil() {
			return nil
		}
		if !r.isStr() {
			return errf(kvevents.KindBadField, "lora_name is not a string")
		}
		f.loraName = st.str(r)
	case fMetadata:
		if r.isNil() {
			return nil
		}
		if !r.isMap() {
			return errf(kvevents.KindBadField, "metadata is not a map")
		}
		return st.metadata(r, f)
	case fCacheSalt:
		return st.cacheSalt(r, f)
	case fExtraKeys:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return errf(kvevents.KindBadField, "extra_keys is not an array")
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
			st.skip(r, depthElem)
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
			return errf(kvevents.KindBadField, "kv_cache_spec_kind is not a string")
		}
		s := st.str(r)
		f.kind = groupKind(s)
	case fGroup:
		if r.isNil() {
			return nil
		}
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxInt32 {
			return errf(kvevents.KindBadField, "group_idx is not an integer in [0, 2^31)")
		}
		f.group, f.hasGroup = int32(v), true
	case fLookahead:
		if r.isNil() {
			return nil
		}
		n, err := r.arrayLen()
		if err != nil {
			return errf(kvevents.KindBadField, "lookahead_token_ids is not an array")
		}
		for i := 0; i < n; i++ {
			st.skip(r, depthElem)
		}
		f.lookahead = f.lookahead || n > 0
	default:
		st.skip(r, depthField)
	}
	return nil
}

// groupKind classifies a kv_cache_spec_kind string. Kinds not known to be
// windowed or state-space are taken as full attention variants (MLA and the
// like).
func groupKind(kind []byte) kvevents.GroupKind {
	var buf [64]byte
	k := lowerASCII(buf[:0], kind)
	switch {
	case bytes.Contains(k, []byte("sliding")) || bytes.Contains(k, []byte("local")) || bytes.Contains(k, []byte("window")):
		return kvevents.GroupKindWindowed
	case bytes.Contains(k, []byte("mamba")) || bytes.Contains(k, []byte("state")) || bytes.Contains(k, []byte("linear")):
		return kvevents.GroupKindState
	default:
		return kvevents.GroupKindFull
	}
}

// lowerASCII is bytes.ToLower(s), in buf when s is short ASCII (vLLM sends
// "full_attention" on every event) so that it costs no allocation.
func lowerASCII(buf, s []byte) []byte {
	if len(s) > cap(buf) {
		return bytes.ToLower(s)
	}
	for _, c := range s {
		if c >= 0x80 {
			return bytes.ToLower(s)
		}
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	return buf
}

func (st *decodeState) metadata(r *reader, f *evFields) *kvevents.Error {
	n, err := r.mapLen()
	if err != nil {
		return errf(kvevents.KindBadField, "metadata is not a map")
	}
	for i := 0; i < n; i++ {
		if !r.isStr() {
			return errf(kvevents.KindBadField, "metadata key is not a string")
		}
		k := st.str(r)
		if string(k) == "cache_salt" {
			if err := st.cacheSalt(r, f); err != nil {
				return err
			}
			continue
		}
		st.skip(r, depthElem)
	}
	return nil
}

func (st *decodeState) cacheSalt(r *reader, f *evFields) *kvevents.Error {
	if r.isNil() {
		return nil
	}
	if !r.isStr() {
		return errf(kvevents.KindBadField, "cache_salt is not a string")
	}
	f.salt = st.str(r)
	return nil
}

// str reads a str or bin the caller knows is next; a truncated one sets
// st.bad.
func (st *decodeState) str(r *reader) []byte {
	s, err := r.str()
	if err != nil {
		st.bad = true
	}
	return s
}

// skip skips a value at depth (from the event) as the checked pass does; a
// malformed or too deeply nested one sets st.bad.
func (st *decodeState) skip(r *reader, depth int) {
	if err := r.skipDepth(depth); err != nil {
		st.bad = true
	}
}

// hash reads one engine block hash: an integer (negative int64 cast
// bitwise) or a bin whose last 8 bytes are read big-endian.
func hash(r *reader) (uint64, *kvevents.Error) {
	if r.isInt() {
		v, _, ok := r.integer()
		if !ok { // truncated: the checked pass fails the batch
			return 0, errf(kvevents.KindMalformed, "truncated hash")
		}
		return v, nil
	}
	c, _ := r.peek()
	if c == 0xc4 || c == 0xc5 || c == 0xc6 {
		b, err := r.str()
		if err != nil {
			return 0, err
		}
		if len(b) < 8 {
			return 0, errf(kvevents.KindBadHash, "bin hash of %d bytes, want at least 8", len(b))
		}
		b = b[len(b)-8:]
		return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
			uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7]), nil
	}
	return 0, errf(kvevents.KindBadHash, "hash of msgpack type 0x%02x", c)
}

// token reads one token id, or the first of an SGLang EAGLE bigram
// [t[i], t[i+1]] (pair reports which).
func token(r *reader) (t uint32, pair bool, err *kvevents.Error) {
	if r.isArray() {
		n, lerr := r.arrayLen()
		if lerr != nil {
			return 0, false, lerr
		}
		if n == 0 {
			return 0, false, errf(kvevents.KindBadToken, "empty token pair")
		}
		v, neg, ok := r.integer()
		if !ok || neg || v > math.MaxUint32 {
			return 0, false, errf(kvevents.KindBadToken, "token pair element is not a uint32")
		}
		for i := 1; i < n; i++ {
			if err := r.skipDepth(depthPairElem); err != nil {
				return 0, false, err
			}
		}
		return uint32(v), true, nil
	}
	v, neg, ok := r.integer()
	if !ok || neg || v > math.MaxUint32 {
		return 0, false, errf(kvevents.KindBadToken, "token id is not a uint32")
	}
	return uint32(v), false, nil
}

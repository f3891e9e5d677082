package kvevents

import "fmt"

// The rules every decoded batch and event must follow, whatever its wire
// format: the decoders of components/kvwire (sluice protobuf and the engines'
// msgpack) call these after reading an event's fields, so that one event gets
// one verdict whichever format carried it. What only a wire format can check
// (msgpack types, a required field that is absent) stays in its decoder.
// docs/kv-events.md lists the rules with their reasons.

// CheckPayload reports a payload of n bytes beyond MaxPayloadBytes.
func (l *Limits) CheckPayload(n int) *Error {
	if n > l.MaxPayloadBytes {
		return errf(KindAbsurdSize, "payload of %d bytes exceeds %d", n, l.MaxPayloadBytes)
	}
	return nil
}

// CheckEvents reports a batch of n events beyond MaxEventsPerBatch; such a
// batch is rejected whole.
func (l *Limits) CheckEvents(n int) *Error {
	if n > l.MaxEventsPerBatch {
		return errf(KindAbsurdSize, "%d events exceed %d per batch", n, l.MaxEventsPerBatch)
	}
	return nil
}

// CheckHashes reports an event of n block hashes beyond MaxHashesPerEvent.
// CheckStored and CheckRemoved apply it; a decoder may call it before it
// reads the hashes, to skip the work.
func (l *Limits) CheckHashes(n int) *Error {
	if n > l.MaxHashesPerEvent {
		return errf(KindAbsurdSize, "%d block hashes exceed %d", n, l.MaxHashesPerEvent)
	}
	return nil
}

// CheckTokens reports a BlockStored of n token ids beyond MaxTokensPerEvent.
// CheckStored applies it; a decoder may call it before it reads the tokens.
func (l *Limits) CheckTokens(n int) *Error {
	if n > l.MaxTokensPerEvent {
		return errf(KindAbsurdSize, "%d token ids exceed %d", n, l.MaxTokensPerEvent)
	}
	return nil
}

// CheckStored validates a decoded BlockStored and brings it to the form the
// index expects, or reports why it must be skipped. s holds the event as
// sent: its hashes, token ids, block size, extra keys and group kind;
// hasGroup reports that the event named its KV-cache group (vLLM
// group_idx). In order:
//
//   - more hashes or token ids than the limits: KindAbsurdSize;
//   - no block hash: KindBadField;
//   - block_size outside [1, MaxTokensPerEvent]: KindBadField;
//   - tokens: block_size × hashes of them is a full event. One block with
//     fewer (but some) tokens is an SGLang short last page: BlockSize
//     becomes its length. Otherwise an event of a named group (hasGroup, or
//     a windowed or state GroupKind) is a group that skipped null blocks: it
//     is marked Sparse and its TokenIDs dropped. Any other count is
//     KindTokenCountMismatch;
//   - extra keys: a list whose entries are all empty carries none and
//     becomes nil; otherwise it needs one entry per block (KindBadField).
func (l *Limits) CheckStored(s *BlockStored, hasGroup bool) *Error {
	nh, nt := len(s.BlockHashes), len(s.TokenIDs)
	if err := l.CheckHashes(nh); err != nil {
		return err
	}
	if err := l.CheckTokens(nt); err != nil {
		return err
	}
	if nh == 0 {
		return errf(KindBadField, "BlockStored with no block hashes")
	}
	bs := s.BlockSize
	if bs <= 0 || bs > l.MaxTokensPerEvent {
		return errf(KindBadField, "block_size %d out of range [1, %d]", bs, l.MaxTokensPerEvent)
	}
	switch {
	case int64(nt) == int64(bs)*int64(nh):
	case nh == 1 && nt > 0 && nt < bs:
		// SGLang short last page reported with the full page size (never
		// read as sparse: a group skipping null blocks has more tokens
		// than its hashes cover, not fewer).
		s.BlockSize = nt
	case hasGroup || !s.GroupKind.PrefixGroup():
		// A group that skipped (null) blocks: valid, but not a prefix.
		s.Sparse, s.TokenIDs = true, nil
	default:
		return errf(KindTokenCountMismatch, "%d token ids for %d blocks of %d", nt, nh, bs)
	}
	if s.ExtraKeys != nil {
		switch {
		case allEmpty(s.ExtraKeys):
			s.ExtraKeys = nil
		case len(s.ExtraKeys) != nh:
			return errf(KindBadField, "%d extra_keys entries for %d blocks: want none or one per block", len(s.ExtraKeys), nh)
		}
	}
	return nil
}

// CheckRemoved validates a decoded BlockRemoved.
func (l *Limits) CheckRemoved(r *BlockRemoved) *Error {
	return l.CheckHashes(len(r.BlockHashes))
}

func allEmpty(keys []string) bool {
	for _, k := range keys {
		if k != "" {
			return false
		}
	}
	return true
}

func errf(kind ErrorKind, format string, args ...any) *Error {
	return &Error{Kind: kind, Event: -1, Detail: fmt.Sprintf(format, args...)}
}

// Canonical reports whether s is in the form CheckStored leaves a kept
// event in: some hashes, a positive block size, extra keys nil or one per
// block, and block size × hashes token ids unless the event is of a group
// that does not describe a prefix (Sparse, or a windowed or state kind). The
// index refuses any other.
func (s *BlockStored) Canonical() bool {
	nb := len(s.BlockHashes)
	switch {
	case nb == 0 || s.BlockSize <= 0:
		return false
	case s.ExtraKeys != nil && len(s.ExtraKeys) != nb:
		return false
	case s.Sparse || !s.GroupKind.PrefixGroup():
		return true
	}
	return len(s.TokenIDs) == nb*s.BlockSize
}

// Package tokenids reads JSON arrays of token ids in one scan. A prompt of token ids is the
// common shape of a long prompt (the gateway's /tokenize answers, prompts clients or the
// gateway send as ids); through encoding/json such an array takes a reflective decode per
// number after a validity pass over the whole input, which for ten thousand ids costs more
// than the HTTP exchange carrying them. Anything this scan does not take is left to
// encoding/json by the callers, which also words the errors.
package tokenids

import "math"

// ScanArray reads an array of decimal integers in uint32 range whose '[' is at b[i], with
// JSON's number syntax (no sign, no leading zero, no fraction or exponent) and whitespace.
// It returns the ids (non-nil, empty for []) and the index just after the ']'; ok is false
// for anything else.
func ScanArray(b []byte, i int) (ids []uint32, end int, ok bool) {
	if i >= len(b) || b[i] != '[' {
		return nil, i, false
	}
	ids = make([]uint32, 0, max(len(b)-i, 2)/6+1) // ~6 bytes per id: one growth at most, usually
	i = SkipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return ids, i + 1, true
	}
	for {
		start := i
		var v uint64
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			v = v*10 + uint64(b[i]-'0')
			if v > math.MaxUint32 {
				return nil, i, false
			}
			i++
		}
		if i == start || (b[start] == '0' && i-start > 1) {
			return nil, i, false
		}
		ids = append(ids, uint32(v))
		i = SkipSpace(b, i)
		if i >= len(b) {
			return nil, i, false
		}
		switch b[i] {
		case ',':
			i = SkipSpace(b, i+1)
		case ']':
			return ids, i + 1, true
		default:
			return nil, i, false
		}
	}
}

// Parse reads b when it is exactly one non-empty array of ids (whitespace around it allowed).
func Parse(b []byte) ([]uint32, bool) {
	i := SkipSpace(b, 0)
	ids, end, ok := ScanArray(b, i)
	if !ok || len(ids) == 0 || SkipSpace(b, end) != len(b) {
		return nil, false
	}
	return ids, true
}

// SkipSpace returns the index of the first byte at or after i that is not JSON whitespace.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

package kvwire

// vLLM folds the LoRA adapter and the cache salt into a block's extra keys;
// sluice expresses both as a namespace instead (docs/kv-events.md,
// "Namespaces"). This file separates them from the keys that stay.

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

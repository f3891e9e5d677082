package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// decoder walks a generic tree (tree.go) and decodes its values by type,
// recording every structural problem with its path (path.go) and source
// line: unknown and duplicate keys, values of the wrong type or out of
// range. It knows no configuration: schema.go says which keys each mapping
// has and what they mean. A null value counts as absent.
type decoder struct {
	problems []Problem
	// discarded lists paths whose values were dropped for having the wrong
	// shape; validation problems they cause are not reported twice.
	discarded []string
	// lines maps each visited path to its source line.
	lines map[string]int
	// advise, when set, explains a key that a mapping does not allow: it
	// returns the key's problems, or false for a plain unknown key.
	advise func(key string, v *node, path string) ([]Problem, bool)
}

func newDecoder(advise func(key string, v *node, path string) ([]Problem, bool)) *decoder {
	return &decoder{lines: map[string]int{}, advise: advise}
}

func (d *decoder) add(path string, line int, msg string) {
	d.problems = append(d.problems, Problem{Path: path, Message: withLine(msg, line)})
}

func (d *decoder) reject(path string, n *node, msg string) {
	d.add(path, n.line, msg)
	d.discarded = append(d.discarded, path)
}

func (d *decoder) mismatch(path string, n *node, want string) {
	d.reject(path, n, fmt.Sprintf("must be %s, not %s", want, n.describe()))
}

// duplicates reports the keys n repeats, at the paths keyPath builds.
func (d *decoder) duplicates(n *node, path string, keyPath func(path, key string) string) {
	for _, dup := range n.dups {
		d.add(keyPath(path, dup.key), dup.line, fmt.Sprintf("duplicate key; it is first set at line %d, keep one", dup.first))
	}
}

// A field is one key of a mapping and how its value decodes into the T
// that the mapping builds.
type field[T any] struct {
	key string
	set func(d *decoder, t *T, v *node, p string)
}

// fields decodes n, which must be a mapping (null is not one here), into
// t: each key by its field. Duplicate keys and keys with no field are
// reported.
func fields[T any](d *decoder, n *node, path string, fs []field[T], t *T) bool {
	if n.kind != kindMap {
		d.mismatch(path, n, "a mapping")
		return false
	}
	d.duplicates(n, path, join)
	for _, pr := range n.pairs {
		p := join(path, pr.key)
		d.lines[p] = pr.line
		if i := slices.IndexFunc(fs, func(f field[T]) bool { return f.key == pr.key }); i >= 0 {
			fs[i].set(d, t, pr.value, p)
			continue
		}
		if d.advise != nil {
			if probs, ok := d.advise(pr.key, pr.value, p); ok {
				d.problems = append(d.problems, probs...)
				continue
			}
		}
		d.add(p, pr.line, unknownKey(pr.key, keysOf(fs)))
	}
	return true
}

// objectOf decodes an optional mapping into a new T, as fields does. Null,
// and a value that is not a mapping (reported), yield nil.
func objectOf[T any](d *decoder, n *node, path string, fs []field[T]) *T {
	if n.kind == kindNull {
		return nil
	}
	t := new(T)
	if !fields(d, n, path, fs, t) {
		return nil
	}
	return t
}

// keysOf lists the keys of fs, in its order.
func keysOf[T any](fs []field[T]) []string {
	keys := make([]string, len(fs))
	for i, f := range fs {
		keys[i] = f.key
	}
	return keys
}

// mapOf decodes a mapping whose keys the document chooses (model ids, label
// keys) rather than the schema: each value's path brackets its key
// (models["org/m"]) and item decodes the value. Null, an empty mapping and
// a value that is not a mapping (reported as not want) yield nil.
func mapOf[V any](d *decoder, n *node, path, want string, item func(v *node, p string) V) map[string]V {
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindMap {
		d.mismatch(path, n, want)
		return nil
	}
	d.duplicates(n, path, mapKey)
	if len(n.pairs) == 0 {
		return nil
	}
	out := make(map[string]V, len(n.pairs))
	for _, pr := range n.pairs {
		p := mapKey(path, pr.key)
		d.lines[p] = pr.line
		out[pr.key] = item(pr.value, p)
	}
	return out
}

// listOf decodes a sequence, item decoding each element at its indexed
// path; a bad element still takes its place, so later paths stay aligned.
// Null, and a value that is not a sequence (reported as not want), yield
// nil; an empty sequence yields an empty, non-nil slice.
func listOf[T any](d *decoder, n *node, path, want string, item func(it *node, p string) T) []T {
	if n.kind == kindNull {
		return nil
	}
	if n.kind != kindSeq {
		d.mismatch(path, n, want)
		return nil
	}
	out := make([]T, 0, len(n.items))
	for i, it := range n.items {
		p := index(path, i)
		d.lines[p] = it.line
		out = append(out, item(it, p))
	}
	return out
}

// unknownKey suggests the closest allowed key, or lists them all.
func unknownKey(key string, keys []string) string {
	best, bestDist := "", 3
	for _, k := range keys {
		if dist := editDistance(foldKey(key), k); dist < bestDist {
			best, bestDist = k, dist
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key; did you mean %q?", best)
	}
	return "unknown key; valid keys here are " + strings.Join(keys, ", ")
}

// foldKey lower-cases a key and folds '-' to '_', so that CLI spellings
// (max-in-flight) match the schema's keys (max_in_flight).
func foldKey(k string) string { return strings.ReplaceAll(strings.ToLower(k), "-", "_") }

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// The scalar decoders return a value and whether n held one: false for
// null (absent) and for a value of the wrong type, which they report.

// opt turns a scalar decoder's result into an optional field's value.
func opt[T any](v T, ok bool) *T {
	if !ok {
		return nil
	}
	return &v
}

// str accepts any scalar: id: 10 is the string "10".
func (d *decoder) str(n *node, p string) (string, bool) {
	switch n.kind {
	case kindNull:
		return "", false
	case kindScalar:
		return n.text, true
	}
	d.mismatch(p, n, "a string")
	return "", false
}

// int accepts integers and floats with no fractional part (1e1).
func (d *decoder) int(n *node, p string) (int64, bool) {
	if n.kind == kindNull {
		return 0, false
	}
	if n.kind == kindScalar {
		switch n.styp {
		case scalarInt:
			if !n.intOK {
				d.reject(p, n, "integer out of range")
				return 0, false
			}
			return n.i, true
		case scalarFloat:
			if n.f == math.Trunc(n.f) && n.f >= math.MinInt64 && n.f < math.MaxInt64 {
				return int64(n.f), true
			}
		}
	}
	d.mismatch(p, n, "an integer")
	return 0, false
}

// intIn is int for a value that must lie in [lo, hi]: one outside is
// rejected with rule.
func (d *decoder) intIn(n *node, p string, lo, hi int64, rule string) (int64, bool) {
	v, ok := d.int(n, p)
	if ok && (v < lo || v > hi) {
		d.reject(p, n, rule)
		return 0, false
	}
	return v, ok
}

// float accepts integers and finite floats.
func (d *decoder) float(n *node, p string) (float64, bool) {
	if n.kind == kindNull {
		return 0, false
	}
	if n.kind == kindScalar {
		switch n.styp {
		case scalarInt:
			if n.intOK {
				return float64(n.i), true
			}
		case scalarFloat:
			if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
				d.reject(p, n, "must be a finite number")
				return 0, false
			}
			return n.f, true
		}
	}
	d.mismatch(p, n, "a number")
	return 0, false
}

func (d *decoder) bool(n *node, p string) (bool, bool) {
	if n.kind == kindNull {
		return false, false
	}
	if n.kind == kindScalar && n.styp == scalarBool {
		return n.b, true
	}
	d.mismatch(p, n, "true or false")
	return false, false
}

// duration accepts a string time.ParseDuration accepts ("600s").
func (d *decoder) duration(n *node, p string) (Duration, bool) {
	if n.kind == kindNull {
		return Duration{}, false
	}
	if n.kind == kindScalar && n.styp == scalarString {
		v, err := time.ParseDuration(n.text)
		if err == nil {
			return Duration{v}, true
		}
	}
	d.reject(p, n, `must be a Go duration string such as "600s"`)
	return Duration{}, false
}

// strList decodes a list of strings, where a null item is missing (and
// reported). A bad item keeps its place with an empty string.
func (d *decoder) strList(n *node, p string) []string {
	return listOf(d, n, p, "a list of strings", func(it *node, ip string) string {
		s, ok := d.str(it, ip)
		if !ok && it.kind == kindNull {
			d.mismatch(ip, it, "a string")
		}
		return s
	})
}

// lineFor returns the source line of path or of its nearest recorded
// ancestor, or 0.
func (d *decoder) lineFor(path string) int {
	for {
		if l, ok := d.lines[path]; ok {
			return l
		}
		if path == "" {
			return 0
		}
		path = parentPath(path)
	}
}

// covers reports whether a validation problem at path is a consequence of a
// value the schema walk already rejected: the path itself, anything below
// it, or its parent (e.g. "set exactly one of plain or pd").
func (d *decoder) covers(path string) bool {
	for _, r := range d.discarded {
		if path == r || strings.HasPrefix(path, r+".") || strings.HasPrefix(path, r+"[") || path == parentPath(r) {
			return true
		}
	}
	return false
}

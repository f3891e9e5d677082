package config

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// decoder walks a generic tree against the schema, building a Document and
// recording every structural problem. A null value counts as absent.
type decoder struct {
	problems []Problem
	// discarded lists paths whose values were dropped for having the wrong
	// shape; validation problems they cause are not reported twice.
	discarded []string
	// lines maps each visited path to its source line.
	lines map[string]int
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

// object checks that n is a mapping whose keys are all in keys, calling set
// for each allowed key. Unknown and dropped keys are reported.
func (d *decoder) object(n *node, path string, keys []string, set func(key string, v *node, p string)) bool {
	if n.kind != kindMap {
		d.mismatch(path, n, "a mapping")
		return false
	}
	for _, dup := range n.dups {
		d.add(join(path, dup.key), dup.line, fmt.Sprintf("duplicate key; it is first set at line %d, keep one", dup.first))
	}
	for _, pr := range n.pairs {
		p := join(path, pr.key)
		d.lines[p] = pr.line
		if slices.Contains(keys, pr.key) {
			set(pr.key, pr.value, p)
			continue
		}
		if probs, ok := droppedKey(pr.key, pr.value, p); ok {
			d.problems = append(d.problems, probs...)
			continue
		}
		d.add(p, pr.line, unknownKey(pr.key, keys))
	}
	return true
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

func (d *decoder) strPtr(n *node, p string) *string {
	if s, ok := d.str(n, p); ok {
		return &s
	}
	return nil
}

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

func (d *decoder) intPtr(n *node, p string) *int64 {
	if v, ok := d.int(n, p); ok {
		return &v
	}
	return nil
}

func (d *decoder) floatPtr(n *node, p string) *float64 {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar {
		switch n.styp {
		case scalarInt:
			if n.intOK {
				f := float64(n.i)
				return &f
			}
		case scalarFloat:
			if math.IsNaN(n.f) || math.IsInf(n.f, 0) {
				d.reject(p, n, "must be a finite number")
				return nil
			}
			f := n.f
			return &f
		}
	}
	d.mismatch(p, n, "a number")
	return nil
}

func (d *decoder) boolPtr(n *node, p string) *bool {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar && n.styp == scalarBool {
		b := n.b
		return &b
	}
	d.mismatch(p, n, "true or false")
	return nil
}

func (d *decoder) durationPtr(n *node, p string) *Duration {
	if n.kind == kindNull {
		return nil
	}
	if n.kind == kindScalar && n.styp == scalarString {
		v, err := time.ParseDuration(n.text)
		if err == nil {
			return &Duration{v}
		}
	}
	d.reject(p, n, `must be a Go duration string such as "600s"`)
	return nil
}

// strList decodes a list of strings. A bad item keeps its index with an
// empty placeholder so later paths stay aligned. An empty list is non-nil.
func (d *decoder) strList(n *node, p string) ([]string, bool) {
	if n.kind == kindNull {
		return nil, false
	}
	if n.kind != kindSeq {
		d.mismatch(p, n, "a list of strings")
		return nil, false
	}
	out := make([]string, 0, len(n.items))
	for i, it := range n.items {
		ip := index(p, i)
		d.lines[ip] = it.line
		s, ok := d.str(it, ip)
		if !ok && it.kind == kindNull {
			d.mismatch(ip, it, "a string")
		}
		out = append(out, s)
	}
	return out, true
}

// list calls item for each element of a sequence.
func (d *decoder) list(n *node, p string, item func(i int, it *node, ip string)) bool {
	if n.kind == kindNull {
		return false
	}
	if n.kind != kindSeq {
		d.mismatch(p, n, "a list")
		return false
	}
	for i, it := range n.items {
		ip := index(p, i)
		d.lines[ip] = it.line
		item(i, it, ip)
	}
	return true
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

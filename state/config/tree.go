package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxTreeNodes bounds the generic tree so that YAML alias expansion cannot
// blow up memory ("billion laughs"). Real configurations are far smaller.
const maxTreeNodes = 1 << 20

// maxJSONDepth bounds JSON nesting, as the YAML parser bounds its own, so
// recursion stays shallow whatever the input.
const maxJSONDepth = 1000

type nodeKind int

const (
	kindNull nodeKind = iota
	kindScalar
	kindMap
	kindSeq
)

type scalarType int

const (
	scalarString scalarType = iota
	scalarInt
	scalarFloat
	scalarBool
)

// node is a format-neutral view of a parsed YAML or JSON value that keeps
// source line numbers, so the schema walk can report every problem.
type node struct {
	kind nodeKind
	line int

	styp  scalarType
	text  string // raw scalar text
	i     int64
	intOK bool // false for an integer out of int64 range
	f     float64
	b     bool

	pairs []pair  // kindMap, in source order, keys unique
	dups  []pair  // kindMap: repeated keys (value nil), reported by the schema walk
	items []*node // kindSeq
}

type pair struct {
	key   string
	line  int
	value *node
	first int // for dups: the line of the key's first occurrence
}

// describe names the node's kind for type-mismatch messages.
func (n *node) describe() string {
	switch n.kind {
	case kindNull:
		return "null"
	case kindMap:
		return "a mapping"
	case kindSeq:
		return "a list"
	}
	switch n.styp {
	case scalarInt:
		return "an integer"
	case scalarFloat:
		return "a number"
	case scalarBool:
		return "a boolean"
	}
	return "a string"
}

// claim records key, set at line, as a key of mapping n, whose keys so far
// seen maps to their lines. It reports false for a repeated key, which it
// records in n.dups for the schema walk to report.
func (n *node) claim(seen map[string]int, key string, line int) bool {
	if first, dup := seen[key]; dup {
		n.dups = append(n.dups, pair{key: key, line: line, first: first})
		return false
	}
	seen[key] = line
	return true
}

// treeBuilder converts a parser's output to nodes, collecting problems such
// as duplicate keys.
type treeBuilder struct {
	problems []Problem
	count    int
	tooBig   bool
	active   map[*yaml.Node]bool // aliases being expanded, to stop cycles
}

func (t *treeBuilder) add(line int, msg string) {
	t.problems = append(t.problems, Problem{Message: withLine(msg, line)})
}

func (t *treeBuilder) newNode(kind nodeKind, line int) *node {
	t.count++
	if t.count > maxTreeNodes && !t.tooBig {
		t.tooBig = true
		t.add(line, fmt.Sprintf("document too large: more than %d values after alias expansion", maxTreeNodes))
	}
	return &node{kind: kind, line: line}
}

// yamlTree parses a single YAML document. A nil node means an empty document.
func yamlTree(data []byte) (*node, []Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, yamlError(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, yamlError(err)
		}
		return nil, []Problem{{Message: withLine("more than one YAML document; put the whole configuration in one", line)}}
	}
	t := &treeBuilder{active: map[*yaml.Node]bool{}}
	return t.result(t.fromYAML(&doc))
}

func yamlError(err error) []Problem {
	return []Problem{{Message: "invalid YAML: " + strings.TrimPrefix(err.Error(), "yaml: ")}}
}

// result is a finished tree with its problems; a tree too large to use is
// nil.
func (t *treeBuilder) result(n *node) (*node, []Problem) {
	if t.tooBig {
		return nil, t.problems
	}
	return n, t.problems
}

func (t *treeBuilder) fromYAML(y *yaml.Node) *node {
	if t.tooBig {
		return &node{}
	}
	switch y.Kind {
	case yaml.DocumentNode:
		if len(y.Content) == 0 {
			return nil
		}
		return t.fromYAML(y.Content[0])
	case yaml.AliasNode:
		if y.Alias == nil || t.active[y.Alias] {
			t.add(y.Line, fmt.Sprintf("alias *%s refers to a value that contains it", y.Value))
			return t.newNode(kindNull, y.Line)
		}
		t.active[y.Alias] = true
		n := t.fromYAML(y.Alias)
		delete(t.active, y.Alias)
		return n
	case yaml.SequenceNode:
		n := t.newNode(kindSeq, y.Line)
		t.active[y] = true
		for _, c := range y.Content {
			n.items = append(n.items, t.fromYAML(c))
		}
		delete(t.active, y)
		return n
	case yaml.MappingNode:
		t.active[y] = true
		defer delete(t.active, y)
		return t.yamlMapping(y)
	case yaml.ScalarNode:
		return t.yamlScalar(y)
	}
	t.add(y.Line, "unsupported YAML value")
	return t.newNode(kindNull, y.Line)
}

func (t *treeBuilder) yamlMapping(y *yaml.Node) *node {
	n := t.newNode(kindMap, y.Line)
	seen := map[string]int{}
	var merges []*node
	for i := 0; i+1 < len(y.Content); i += 2 {
		k, v := y.Content[i], y.Content[i+1]
		for k.Kind == yaml.AliasNode && k.Alias != nil {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			t.add(k.Line, "mapping keys must be plain strings")
			continue
		}
		if k.ShortTag() == "!!merge" {
			m := t.fromYAML(v)
			switch m.kind {
			case kindMap:
				merges = append(merges, m)
			case kindSeq:
				for _, it := range m.items {
					if it.kind != kindMap {
						t.add(v.Line, "a merge key (<<) takes a mapping or a list of mappings")
						continue
					}
					merges = append(merges, it)
				}
			default:
				t.add(v.Line, "a merge key (<<) takes a mapping or a list of mappings")
			}
			continue
		}
		if n.claim(seen, k.Value, k.Line) {
			n.pairs = append(n.pairs, pair{key: k.Value, line: k.Line, value: t.fromYAML(v)})
		}
	}
	// Merged keys fill in only what the mapping does not set itself; earlier
	// merge sources win over later ones, as in YAML's merge-key convention.
	for _, m := range merges {
		for _, p := range m.pairs {
			if _, ok := seen[p.key]; ok {
				continue
			}
			seen[p.key] = p.line
			n.pairs = append(n.pairs, p)
		}
	}
	return n
}

func (t *treeBuilder) yamlScalar(y *yaml.Node) *node {
	n := t.newNode(kindScalar, y.Line)
	n.text = y.Value
	switch y.ShortTag() {
	case "!!null":
		n.kind = kindNull
	case "!!bool":
		if err := y.Decode(&n.b); err == nil {
			n.styp = scalarBool
		}
	case "!!int":
		n.styp = scalarInt
		if err := y.Decode(&n.i); err == nil {
			n.intOK = true
		}
	case "!!float":
		if err := y.Decode(&n.f); err == nil {
			n.styp = scalarFloat
		}
	}
	return n
}

// jsonTree parses one JSON value. Numbers keep their exact text.
func jsonTree(data []byte) (*node, []Problem) {
	lines := lineStarts(data)
	lineAt := func(off int64) int {
		return 1 + sort.Search(len(lines), func(i int) bool { return int64(lines[i]) >= off })
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	t := &treeBuilder{}
	n, err := t.fromJSON(dec, lineAt, 0)
	if err == nil {
		if _, extra := dec.Token(); !errors.Is(extra, io.EOF) {
			err = errors.New("unexpected data after the top-level value")
			if extra != nil && !errors.Is(extra, io.EOF) {
				err = extra
			}
		}
	}
	if err != nil {
		return nil, []Problem{{Message: withLine("invalid JSON: "+err.Error(), lineAt(dec.InputOffset()))}}
	}
	return t.result(n)
}

// lineStarts returns the offsets just past each newline, so that the number
// of entries below an offset is its zero-based line.
func lineStarts(data []byte) []int {
	var out []int
	for i, c := range data {
		if c == '\n' {
			out = append(out, i+1)
		}
	}
	return out
}

func (t *treeBuilder) fromJSON(dec *json.Decoder, lineAt func(int64) int, depth int) (*node, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("nested more than %d levels deep", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty document")
		}
		return nil, err
	}
	line := lineAt(dec.InputOffset())
	switch v := tok.(type) {
	case json.Delim:
		switch v {
		case '{':
			n := t.newNode(kindMap, line)
			seen := map[string]int{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := kt.(string)
				kline := lineAt(dec.InputOffset())
				val, err := t.fromJSON(dec, lineAt, depth+1)
				if err != nil {
					return nil, err
				}
				if n.claim(seen, key, kline) {
					n.pairs = append(n.pairs, pair{key: key, line: kline, value: val})
				}
			}
			_, err := dec.Token()
			return n, err
		case '[':
			n := t.newNode(kindSeq, line)
			for dec.More() {
				it, err := t.fromJSON(dec, lineAt, depth+1)
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, it)
			}
			_, err := dec.Token()
			return n, err
		}
		return nil, fmt.Errorf("unexpected %v", v)
	case nil:
		return t.newNode(kindNull, line), nil
	case bool:
		n := t.newNode(kindScalar, line)
		n.styp, n.b, n.text = scalarBool, v, strconv.FormatBool(v)
		return n, nil
	case string:
		n := t.newNode(kindScalar, line)
		n.text = v
		return n, nil
	case json.Number:
		n := t.newNode(kindScalar, line)
		n.text = v.String()
		if !strings.ContainsAny(n.text, ".eE") {
			n.styp = scalarInt
			i, err := strconv.ParseInt(n.text, 10, 64)
			n.i, n.intOK = i, err == nil
			return n, nil
		}
		// Out-of-range numbers parse to ±Inf, which the schema walk rejects.
		n.styp = scalarFloat
		n.f, _ = strconv.ParseFloat(n.text, 64)
		return n, nil
	}
	return nil, fmt.Errorf("unexpected token %v", tok)
}

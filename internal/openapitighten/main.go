// Command openapitighten rewrites the OpenAPI v2 document that protoc-gen-openapiv2 generated
// so that it says what the decider's REST gateway enforces, where the plugin's options cannot:
//
//   - int64 and uint64 fields and parameters (JSON strings, as protojson writes them) get a
//     decimal pattern, so a client or fuzzer knows "abc" or "" is not a version number;
//   - request body schemas, and the messages they contain, get additionalProperties: false,
//     because the decider refuses unknown fields (strict JSON decoding);
//   - a body parameter whose schema requires no field is optional, because the gateway reads a
//     missing body as an empty request.
//
// Key order is kept, so the rewritten file diffs cleanly against the plugin's output.
//
//	openapitighten FILE   rewrites FILE in place
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Patterns of the decimal strings protojson accepts for 64-bit integers, bounded to 18 digits
// so that every value that matches also fits.
const (
	int64Pattern  = "^-?[0-9]{1,18}$"
	uint64Pattern = "^[0-9]{1,18}$"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: openapitighten FILE")
		os.Exit(2)
	}
	if err := rewrite(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "openapitighten:", err)
		os.Exit(1)
	}
}

func rewrite(path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := tighten(raw)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return os.WriteFile(path, out, 0o644)
}

// tighten applies every rule to one document and returns it indented as the plugin writes it.
func tighten(raw []byte) ([]byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	doc, ok := v.(*object)
	if !ok {
		return nil, errors.New("the document is not a JSON object")
	}
	defs, _ := doc.get("definitions").(*object)
	paths, _ := doc.get("paths").(*object)
	if defs == nil || paths == nil {
		return nil, errors.New("the document has no definitions or no paths")
	}
	walk(doc, patternInt64)
	closed := map[string]bool{}
	for _, p := range paths.keys {
		ops, _ := paths.get(p).(*object)
		if ops == nil {
			continue
		}
		for _, m := range ops.keys {
			op, _ := ops.get(m).(*object)
			params, _ := op.get("parameters").([]any)
			for _, pv := range params {
				param, _ := pv.(*object)
				if param == nil || param.get("in") != "body" {
					continue
				}
				schema, _ := param.get("schema").(*object)
				closeSchema(defs, schema, closed)
				if target := resolve(defs, schema); target != nil && len(asSlice(target.get("required"))) == 0 {
					param.set("required", false)
				}
			}
		}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// patternInt64 adds the decimal pattern to a string-encoded 64-bit integer schema or parameter
// that has none.
func patternInt64(o *object) {
	if o.get("type") != "string" || o.get("pattern") != nil {
		return
	}
	switch o.get("format") {
	case "int64":
		o.insertAfter("format", "pattern", int64Pattern)
	case "uint64":
		o.insertAfter("format", "pattern", uint64Pattern)
	}
}

// closeSchema sets additionalProperties: false on the object schema s (or the definition it
// refers to) and on every object schema below it. Free-form objects (google.protobuf.Struct,
// maps) have no properties and stay open.
func closeSchema(defs, s *object, done map[string]bool) {
	if s == nil {
		return
	}
	if ref, ok := s.get("$ref").(string); ok {
		name := strings.TrimPrefix(ref, "#/definitions/")
		if done[name] {
			return
		}
		done[name] = true
		closeSchema(defs, resolve(defs, s), done)
		return
	}
	if props, ok := s.get("properties").(*object); ok {
		if s.get("additionalProperties") == nil {
			s.insertAfter("properties", "additionalProperties", false)
		}
		for _, k := range props.keys {
			p, _ := props.get(k).(*object)
			closeSchema(defs, p, done)
		}
	}
	if items, ok := s.get("items").(*object); ok {
		closeSchema(defs, items, done)
	}
}

// resolve follows s's $ref into defs; a schema without one is returned as is.
func resolve(defs, s *object) *object {
	if s == nil {
		return nil
	}
	ref, ok := s.get("$ref").(string)
	if !ok {
		return s
	}
	t, _ := defs.get(strings.TrimPrefix(ref, "#/definitions/")).(*object)
	return t
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// walk calls f on every object in v, parents before children.
func walk(v any, f func(*object)) {
	switch v := v.(type) {
	case *object:
		f(v)
		for _, k := range v.keys {
			walk(v.vals[k], f)
		}
	case []any:
		for _, e := range v {
			walk(e, f)
		}
	}
}

// object is a JSON object that keeps its key order.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) any {
	if o == nil {
		return nil
	}
	return o.vals[k]
}

// set replaces k's value, or appends k.
func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// insertAfter adds k right after the key after (at the end when after is absent); an existing
// k only has its value replaced.
func (o *object) insertAfter(after, k string, v any) {
	if _, ok := o.vals[k]; ok {
		o.vals[k] = v
		return
	}
	o.vals[k] = v
	for i, key := range o.keys {
		if key == after {
			o.keys = append(o.keys[:i+1], append([]string{k}, o.keys[i+1:]...)...)
			return
		}
	}
	o.keys = append(o.keys, k)
}

func (o *object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := json.Marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// decodeValue reads one JSON value, objects as *object, numbers as json.Number.
func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				o.set(k, v)
			}
			_, err := dec.Token() // '}'
			return o, err
		case '[':
			a := []any{}
			for dec.More() {
				v, err := decodeValue(dec)
				if err != nil {
					return nil, err
				}
				a = append(a, v)
			}
			_, err := dec.Token() // ']'
			return a, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Format is a document encoding.
type Format int

const (
	// FormatAuto picks JSON when the first non-space byte is '{' and YAML
	// otherwise. [Marshal] writes YAML for it.
	FormatAuto Format = iota
	// FormatYAML is YAML 1.2 (a single document; anchors and merge keys
	// are allowed).
	FormatYAML
	// FormatJSON is strict JSON.
	FormatJSON
)

// String returns "auto", "yaml" or "json".
func (f Format) String() string {
	switch f {
	case FormatYAML:
		return "yaml"
	case FormatJSON:
		return "json"
	case FormatAuto:
		return "auto"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// FormatForPath returns the format implied by a file name's extension:
// .json is JSON, .yaml and .yml are YAML, anything else is FormatAuto.
func FormatForPath(path string) Format {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".json":
		return FormatJSON
	case ".yaml", ".yml":
		return FormatYAML
	}
	return FormatAuto
}

var utf8BOM = []byte("\xef\xbb\xbf")

// Parse decodes and validates a document. On failure it returns a nil
// document and a [*ValidationError] listing every problem at once: syntax
// errors, unknown keys, dropped options (with what replaces them), values of
// the wrong type, and every rule of [Document.Validate]. Messages carry the
// source line where known. Empty input is the empty document. A null value
// counts as absent, except that an empty group (plain:, prefill:) means a
// group of every engine with the inherited policy. Any scalar is accepted
// where a string is expected (id: 10 is the id "10").
func Parse(data []byte, format Format) (*Document, error) {
	data = bytes.TrimPrefix(data, utf8BOM)
	if format == FormatAuto {
		format = FormatYAML
		if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
			format = FormatJSON
		}
	}
	var (
		tree     *node
		problems []Problem
	)
	switch format {
	case FormatYAML:
		tree, problems = yamlTree(data)
	case FormatJSON:
		tree, problems = jsonTree(data)
	default:
		return nil, fmt.Errorf("parse configuration: unknown format %v", format)
	}
	if tree == nil && len(problems) > 0 {
		return nil, &ValidationError{Problems: problems}
	}
	d := newDecoder(droppedKey)
	doc := d.document(tree)
	problems = append(problems, d.problems...)
	lines := make([]int, len(problems))
	for i, p := range problems {
		lines[i] = d.lineFor(p.Path)
	}
	var verr *ValidationError
	if err := doc.Validate(); errors.As(err, &verr) {
		for _, p := range verr.Problems {
			if d.covers(p.Path) {
				continue
			}
			line := d.lineFor(p.Path)
			p.Message = withLine(p.Message, line)
			problems = append(problems, p)
			lines = append(lines, line)
		}
	}
	if len(problems) == 0 {
		return doc, nil
	}
	// Report in source order; problems found by the same line keep the
	// order the schema walk and validation found them in.
	order := make([]int, len(problems))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return lines[order[a]] < lines[order[b]] })
	sorted := make([]Problem, len(problems))
	for i, j := range order {
		sorted[i] = problems[j]
	}
	return nil, &ValidationError{Problems: sorted}
}

// Marshal encodes d deterministically (map keys sorted, unset fields
// omitted) as YAML (also for FormatAuto) or indented JSON. A nil document
// encodes as the empty document. Parse reads the result back to an equal
// document.
func Marshal(d *Document, f Format) ([]byte, error) {
	if d == nil {
		d = &Document{}
	}
	switch f {
	case FormatJSON:
		b, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("marshal configuration: %w", err)
		}
		return append(b, '\n'), nil
	case FormatYAML, FormatAuto:
		var buf bytes.Buffer
		enc := yaml.NewEncoder(&buf)
		enc.SetIndent(2)
		if err := enc.Encode(d); err != nil {
			return nil, fmt.Errorf("marshal configuration: %w", err)
		}
		if err := enc.Close(); err != nil {
			return nil, fmt.Errorf("marshal configuration: %w", err)
		}
		return buf.Bytes(), nil
	}
	return nil, fmt.Errorf("marshal configuration: unknown format %v", f)
}

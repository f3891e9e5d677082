package pgstore

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sluicehq/sluice/state/config"
)

// nulMessage is the problem of a string holding U+0000: a valid configuration (the file store
// keeps it), but PostgreSQL's text and jsonb cannot hold NUL, so this store refuses the document
// as invalid for it instead of failing the write.
const nulMessage = "contains NUL (U+0000), which the Postgres configuration store cannot hold; remove it"

// nulProblems names every string of doc that holds NUL (the free-text fields: model ids, LoRA
// adapters, label keys and values; ids follow the id rule and cannot), or the document itself
// when the NUL is elsewhere.
func nulProblems(doc *config.Document) error {
	var ps []config.Problem
	add := func(path, s string) {
		if strings.ContainsRune(s, 0) {
			ps = append(ps, config.Problem{Path: path, Message: nulMessage})
		}
	}
	for i, e := range doc.Engines {
		for j, m := range e.Models {
			add(fmt.Sprintf("workers[%d].models[%d]", i, j), m)
		}
		for j, a := range e.LoRAAdapters {
			add(fmt.Sprintf("workers[%d].lora_adapters[%d]", i, j), a)
		}
		for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
			add(fmt.Sprintf("workers[%d].labels[%q]", i, k), k+e.Labels[k])
		}
	}
	for i, b := range doc.Buckets {
		for j, m := range b.Models {
			add(fmt.Sprintf("buckets[%d].models[%d]", i, j), m)
		}
	}
	for _, m := range slices.Sorted(maps.Keys(doc.Models)) {
		add(fmt.Sprintf("models[%q]", m), m)
	}
	if len(ps) == 0 {
		ps = append(ps, config.Problem{Path: "document", Message: "a string " + nulMessage})
	}
	return &config.ValidationError{Problems: ps}
}

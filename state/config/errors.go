package config

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is matched (with errors.Is) by every error reporting an invalid
// document, whatever stage found the problem.
var ErrInvalid = errors.New("invalid configuration")

// ErrConflict is matched by a [*ConflictError]: an update was based on a
// version that is no longer current.
var ErrConflict = errors.New("configuration version conflict")

// ErrReadOnly is returned by [FileStore.Apply] on a store that has no file to
// write, i.e. one serving built-in defaults.
var ErrReadOnly = errors.New("configuration store is read-only")

// ErrEmptyDocument is matched by the [*ValidationError] a write of an empty
// document gets (see [Document.IsEmpty]): an empty request body, {}, a
// misspelled field or a truncated file must never replace a configuration.
var ErrEmptyDocument = errors.New("empty configuration document")

// EmptyDocumentError is the [*ValidationError] for a write of an empty
// document ([Document.IsEmpty]); field names what was empty ("document" for
// the API field, "" for a whole file). It matches [ErrEmptyDocument] and
// [ErrInvalid].
func EmptyDocumentError(field string) error {
	return &ValidationError{empty: true, Problems: []Problem{{Path: field, Message: "the document is empty: it sets none of " +
		strings.Join(documentKeys, ", ") + "; send the whole configuration (GetConfig, GET /v1/admin/config, shows the one in force), " +
		"or change single buckets and engines through their own calls"}}}
}

// Problem is one thing wrong with a document.
type Problem struct {
	// Path locates the offending field, e.g.
	// buckets[1].groups.pd.decode.worker_ids[0]; map keys are written
	// models["name"]. It is empty for the document as a whole.
	Path string
	// Message says what is wrong and how to fix it. When the problem was
	// found while parsing text it ends with the source line, "(line N)".
	Message string
}

// withLine ends a problem message with its source line, when known.
func withLine(msg string, line int) string {
	if line <= 0 {
		return msg
	}
	return fmt.Sprintf("%s (line %d)", msg, line)
}

// String renders the problem as "path: message".
func (p Problem) String() string {
	if p.Path == "" {
		return p.Message
	}
	return p.Path + ": " + p.Message
}

// ValidationError lists every problem found in a document. It matches
// [ErrInvalid].
type ValidationError struct {
	// Problems is never empty, in document order.
	Problems []Problem
	// empty marks [EmptyDocumentError].
	empty bool
}

// Error lists every problem, one per line, after a summary line.
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	if len(e.Problems) == 1 {
		b.WriteString(" (1 problem):")
	} else {
		fmt.Fprintf(&b, " (%d problems):", len(e.Problems))
	}
	for _, p := range e.Problems {
		b.WriteString("\n  ")
		b.WriteString(p.String())
	}
	return b.String()
}

// Is reports whether target is [ErrInvalid], or [ErrEmptyDocument] for the
// error of an empty document.
func (e *ValidationError) Is(target error) bool {
	return target == ErrInvalid || (e.empty && target == ErrEmptyDocument)
}

// ConflictError rejects an update whose base version is not the current one;
// the caller should re-read the current snapshot and retry. It matches
// [ErrConflict].
type ConflictError struct {
	// Current is the version the store holds now.
	Current int64
}

// Error names the current version.
func (e *ConflictError) Error() string {
	return fmt.Sprintf("%v: current version is %d", ErrConflict, e.Current)
}

// Unwrap returns [ErrConflict].
func (e *ConflictError) Unwrap() error { return ErrConflict }

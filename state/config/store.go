package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Store is a versioned source of configuration snapshots. [FileStore] and the
// Postgres store (state/pgstore) implement it; configtest.Run is the contract
// both pass.
//
// Versions start at 1 and grow by one with every accepted change. Every write
// validates the whole document first ([*ValidationError] on failure, nothing
// stored), carries the version it was based on ([*ConflictError] when that is
// no longer current), and is atomic: readers see the old or the new snapshot,
// never a mix.
type Store interface {
	// Current returns the snapshot in force without blocking.
	Current() Snapshot
	// Subscribe returns a channel that receives each newer snapshot (a slow
	// reader sees only the latest) and a func that unsubscribes and closes it.
	Subscribe() (<-chan Snapshot, func())
	// Run watches the backing storage for changes made elsewhere until ctx
	// is done, then returns nil.
	Run(ctx context.Context) error
	// Apply validates doc and stores it as the version after basedOn.
	// The author is taken from ctx ([WithAuthor]).
	Apply(ctx context.Context, doc *Document, basedOn int64) (Snapshot, error)
	// Versions lists the versions the store keeps, newest first, at most
	// limit of them (limit <= 0 means all).
	Versions(ctx context.Context, limit int) ([]VersionInfo, error)
	// Version returns one stored version with its document, or an error
	// matching [ErrVersionNotFound].
	Version(ctx context.Context, version int64) (Revision, error)
	// Rollback stores the document of version as a new version after
	// basedOn; the log keeps growing, nothing is rewritten.
	Rollback(ctx context.Context, version, basedOn int64) (Snapshot, error)
}

// ErrVersionNotFound is matched by errors for a version the store does not hold.
var ErrVersionNotFound = errors.New("configuration version not found")

// ErrUnavailable is matched by errors of a store whose backing service cannot
// be reached; the caller may retry later. Reads of Current are unaffected.
// Such errors may name the database's address or user: show callers only the
// Detail of an [*UnavailableError].
var ErrUnavailable = errors.New("configuration store unavailable")

// UnavailableError is an [ErrUnavailable] whose Detail is safe to show to the
// caller (it names no address, database or user), e.g. whether anything was
// written.
type UnavailableError struct {
	Detail string
}

// Error joins ErrUnavailable and Detail.
func (e *UnavailableError) Error() string {
	return ErrUnavailable.Error() + ": " + e.Detail
}

// Unwrap returns ErrUnavailable.
func (e *UnavailableError) Unwrap() error { return ErrUnavailable }

// VersionInfo describes one entry of a store's version log.
type VersionInfo struct {
	// Version is the version number, from 1.
	Version int64
	// Author is who made the change ([WithAuthor]), e.g. "admin" or "file".
	Author string
	// CreatedAt is when the version was stored.
	CreatedAt time.Time
	// Summary says what changed relative to the previous version ([Summarize]).
	Summary string
	// RollbackOf is the version a rollback restored; 0 otherwise.
	RollbackOf int64
}

// Revision is one stored version with its full document.
type Revision struct {
	VersionInfo
	// Document is valid and shared; do not modify it.
	Document *Document
}

type authorKey struct{}

// WithAuthor returns a context whose writes are recorded as made by author.
func WithAuthor(ctx context.Context, author string) context.Context {
	return context.WithValue(ctx, authorKey{}, author)
}

// AuthorFrom returns the author set by [WithAuthor], or "unknown".
func AuthorFrom(ctx context.Context) string {
	if a, ok := ctx.Value(authorKey{}).(string); ok && a != "" {
		return a
	}
	return "unknown"
}

// Summarize describes how next differs from prev in one line, naming the
// buckets and engines added, removed or changed, e.g.
// "buckets: +long ~short; workers: -a2". It returns "no changes" when the
// documents encode identically.
func Summarize(prev, next *Document) string {
	pp, np := prev, next
	if pp == nil {
		pp = &Document{}
	}
	if np == nil {
		np = &Document{}
	}
	var parts []string
	bucketID := func(b BucketSpec) string { return b.ID }
	if s := diffSets(encodedByID(pp.EffectiveBuckets(), bucketID), encodedByID(np.EffectiveBuckets(), bucketID)); s != "" {
		parts = append(parts, "buckets: "+s)
	}
	engineID := func(w EngineSpec) string { return w.ID }
	if s := diffSets(encodedByID(pp.Engines, engineID), encodedByID(np.Engines, engineID)); s != "" {
		parts = append(parts, "workers: "+s)
	}
	if encodeJSON(pp.DefaultPolicy) != encodeJSON(np.DefaultPolicy) {
		parts = append(parts, "default_policy changed")
	}
	if encodeJSON(pp.Models) != encodeJSON(np.Models) {
		parts = append(parts, "models changed")
	}
	if encodeJSON(pp.TTFTSLO) != encodeJSON(np.TTFTSLO) {
		parts = append(parts, "ttft_slo changed")
	}
	if encodeJSON(pp.Shards) != encodeJSON(np.Shards) {
		parts = append(parts, "shards changed")
	}
	if len(parts) == 0 {
		if !sameDocument(prev, next) {
			return "document changed"
		}
		return "no changes"
	}
	return strings.Join(parts, "; ")
}

// encodedByID maps each item's id to its JSON encoding.
func encodedByID[T any](items []T, id func(T) string) map[string]string {
	m := make(map[string]string, len(items))
	for _, it := range items {
		m[id(it)] = encodeJSON(it)
	}
	return m
}

func diffSets(prev, next map[string]string) string {
	var out []string
	keys := make([]string, 0, len(prev)+len(next))
	for k := range prev {
		keys = append(keys, k)
	}
	for k := range next {
		if _, ok := prev[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		p, inPrev := prev[k]
		n, inNext := next[k]
		switch {
		case !inPrev:
			out = append(out, "+"+k)
		case !inNext:
			out = append(out, "-"+k)
		case p != n:
			out = append(out, "~"+k)
		}
	}
	return strings.Join(out, " ")
}

func encodeJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Package pgstore is the PostgreSQL configuration store: a [config.Store]
// whose versions live in an append-only log, whose writes are single
// transactions (validate, check the base version, bump, log, NOTIFY), and
// whose replicas reload within moments through LISTEN/NOTIFY.
//
// It is the only package of sluice that imports pgx. Every statement is
// parameterised. The schema is created by migrations embedded in the binary
// and applied at start-up under an advisory lock, so replicas starting
// together apply each migration once.
package pgstore

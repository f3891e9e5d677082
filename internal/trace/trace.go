// Package trace reads the public LLM workload traces sluice replays (the Mooncake FAST'25
// conversation trace and the Azure LLM inference trace) into one request type, windows and
// time-scales them, and turns a request into prompt token ids such that equal prefix block ids
// give equal tokens — so a replay against real or simulated engines reuses KV cache exactly where
// the original traffic could.
package trace

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// BlockTokens is the Mooncake trace's prefix block size: hash id i of a request covers its
// tokens [512·i, 512·(i+1)).
const BlockTokens = 512

// Request is one request of a trace.
type Request struct {
	// Index is the request's position in the file (0-based), stable under Window and Scale.
	Index int
	// Arrival is the time since the trace's first request.
	Arrival time.Duration
	// InputTokens and OutputTokens are the prompt and generated lengths.
	InputTokens, OutputTokens int
	// BlockIDs are the prefix block ids of the prompt (one per BlockTokens, the last possibly
	// partial); equal ids mean an identical prefix. Nil for traces without prefix data (Azure).
	BlockIDs []int64
}

// Read reads a trace file, choosing the format by extension: .jsonl is the Mooncake format,
// .csv the Azure format.
func Read(path string) ([]Request, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var reqs []Request
	switch ext := strings.ToLower(filepath.Ext(path)); ext {
	case ".jsonl":
		reqs, err = ReadMooncake(f)
	case ".csv":
		reqs, err = ReadAzure(f)
	default:
		return nil, fmt.Errorf("trace %s: unknown extension %q; want .jsonl (Mooncake) or .csv (Azure)", path, ext)
	}
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", path, err)
	}
	return reqs, nil
}

// ReadMooncake reads the Mooncake JSON Lines format: one
// {"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [...]} per line, with
// len(hash_ids) == ceil(input_length / 512). Unknown keys, missing keys and inconsistent lengths
// are errors naming the line.
func ReadMooncake(r io.Reader) ([]Request, error) {
	type line struct {
		Timestamp    *int64  `json:"timestamp"`
		InputLength  *int    `json:"input_length"`
		OutputLength *int    `json:"output_length"`
		HashIDs      []int64 `json:"hash_ids"`
	}
	var out []Request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var l line
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		switch {
		case l.Timestamp == nil || l.InputLength == nil || l.OutputLength == nil || l.HashIDs == nil:
			return nil, fmt.Errorf("line %d: want timestamp, input_length, output_length and hash_ids", n)
		case *l.Timestamp < 0 || *l.InputLength <= 0 || *l.OutputLength < 0:
			return nil, fmt.Errorf("line %d: timestamp %d, input_length %d, output_length %d: want >= 0, > 0, >= 0",
				n, *l.Timestamp, *l.InputLength, *l.OutputLength)
		case len(l.HashIDs) != (*l.InputLength+BlockTokens-1)/BlockTokens:
			return nil, fmt.Errorf("line %d: %d hash_ids for input_length %d: want ceil(input_length/%d) = %d",
				n, len(l.HashIDs), *l.InputLength, BlockTokens, (*l.InputLength+BlockTokens-1)/BlockTokens)
		}
		out = append(out, Request{Index: len(out), Arrival: time.Duration(*l.Timestamp) * time.Millisecond,
			InputTokens: *l.InputLength, OutputTokens: *l.OutputLength, BlockIDs: l.HashIDs})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", n+1, err)
	}
	return rebase(out)
}

// azureTime is the Azure trace's timestamp layout (100 ns precision, no zone).
const azureTime = "2006-01-02 15:04:05.9999999"

// ReadAzure reads the Azure LLM inference trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens):
// lengths and arrivals, no prefix data.
func ReadAzure(r io.Reader) ([]Request, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = 3
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	if strings.Join(head, ",") != "TIMESTAMP,ContextTokens,GeneratedTokens" {
		return nil, fmt.Errorf("header %q: want TIMESTAMP,ContextTokens,GeneratedTokens", strings.Join(head, ","))
	}
	var out []Request
	var first time.Time
	for row := 2; ; row++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", row, err)
		}
		ts, err := time.Parse(azureTime, rec[0])
		if err != nil {
			return nil, fmt.Errorf("row %d: TIMESTAMP %q: %w", row, rec[0], err)
		}
		in, err1 := strconv.Atoi(rec[1])
		outTok, err2 := strconv.Atoi(rec[2])
		if err := errors.Join(err1, err2); err != nil || in <= 0 || outTok < 0 {
			return nil, fmt.Errorf("row %d: ContextTokens %q, GeneratedTokens %q: want an integer > 0 and one >= 0", row, rec[1], rec[2])
		}
		if len(out) == 0 {
			first = ts
		}
		out = append(out, Request{Index: len(out), Arrival: ts.Sub(first), InputTokens: in, OutputTokens: outTok})
	}
	return rebase(out)
}

// rebase checks arrivals are in order and makes the first one zero.
func rebase(reqs []Request) ([]Request, error) {
	if len(reqs) == 0 {
		return nil, errors.New("trace holds no request")
	}
	for i := 1; i < len(reqs); i++ {
		if reqs[i].Arrival < reqs[i-1].Arrival {
			return nil, fmt.Errorf("request %d arrives at %v, before request %d (%v): the trace must be in arrival order",
				i, reqs[i].Arrival, i-1, reqs[i-1].Arrival)
		}
	}
	base := reqs[0].Arrival
	for i := range reqs {
		reqs[i].Arrival -= base
	}
	return reqs, nil
}

// Window returns the requests arriving in [from, from+length), their arrivals rebased to the
// window's start; length <= 0 means to the end.
func Window(reqs []Request, from, length time.Duration) []Request {
	var out []Request
	for _, r := range reqs {
		if r.Arrival < from || (length > 0 && r.Arrival >= from+length) {
			continue
		}
		r.Arrival -= from
		out = append(out, r)
	}
	return out
}

// Scale divides every arrival by speed: speed 2 makes arrivals twice as dense. Speed must be > 0.
func Scale(reqs []Request, speed float64) []Request {
	out := make([]Request, len(reqs))
	for i, r := range reqs {
		r.Arrival = time.Duration(float64(r.Arrival) / speed)
		out[i] = r
	}
	return out
}

// TokenIDs returns the prompt of r as token ids in [1, vocab): each prefix block id becomes a
// fixed pseudo-random block of BlockTokens tokens (the last block cut to the input length), so
// equal block ids are equal token sequences and a shared prefix of ids is a shared token prefix.
// A request without block ids (Azure) gets tokens of its own, seeded by its index, so nothing is
// shared. vocab must be at least 2.
func (r Request) TokenIDs(vocab uint32) []uint32 {
	out := make([]uint32, 0, r.InputTokens)
	if r.BlockIDs == nil {
		for i := range r.InputTokens {
			out = append(out, token(^uint64(r.Index), i, vocab))
		}
		return out
	}
	for _, id := range r.BlockIDs {
		for i := 0; i < BlockTokens && len(out) < r.InputTokens; i++ {
			out = append(out, token(uint64(id), i, vocab))
		}
	}
	return out
}

// token is token i of the block seeded by seed: splitmix64 of (seed, i), in [1, vocab).
func token(seed uint64, i int, vocab uint32) uint32 {
	z := seed*0x9E3779B97F4A7C15 + uint64(i+1)*0xBF58476D1CE4E5B9
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	z ^= z >> 31
	return 1 + uint32(z%uint64(vocab-1))
}

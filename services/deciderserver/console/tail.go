package console

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/decider"
)

// Record is one Decide call as the console shows it. The decider's Decide path fills one per
// call on its stack and Tail.Put copies it into the ring; readers get copies.
type Record struct {
	// Seq is the tail's sequence number, 1 for the first call; Put sets it.
	Seq uint64    `json:"seq"`
	At  time.Time `json:"at"`
	// TookMicros is the time spent in the decider, excluding transport.
	TookMicros  int64  `json:"took_us"`
	Model       string `json:"model"`
	RequestID   string `json:"request_id,omitempty"`
	InputTokens int64  `json:"input_tokens"`
	// PeakTokens is the expected peak (input plus output budget); 0 when the caller sent none.
	PeakTokens    int64  `json:"peak_tokens,omitempty"`
	DryRun        bool   `json:"dry_run,omitempty"`
	Bucket        string `json:"bucket,omitempty"`
	ConfigVersion int64  `json:"config_version,omitempty"`
	// Engine is the plain engine, or the prefill engine of a PD pick (Decode set).
	Engine       string `json:"engine,omitempty"`
	Reason       string `json:"reason,omitempty"`
	Decode       string `json:"decode,omitempty"`
	DecodeReason string `json:"decode_reason,omitempty"`
	// Error is the refusal's machine-readable reason (ADMISSION_REJECTED, ...); empty on success.
	Error      string      `json:"error,omitempty"`
	Message    string      `json:"message,omitempty"`
	Rejections []Rejection `json:"rejections,omitempty"`
	// HasExplain says the caller asked for an explanation; GET /ui/api/decisions/{seq} has it.
	HasExplain bool `json:"has_explain,omitempty"`

	// Explain is the decider's explanation when the caller asked for one.
	Explain *decider.Explain `json:"-"`
}

// Sample is a decision the cache statistics look up in the prefix index: which share of the
// prompt the picked engine holds. The Decide path offers at most one per SampleEvery, with a
// copy of the prompt's token ids, so nothing it keeps is shared with the request.
type Sample struct {
	At                     time.Time
	Engine                 string
	Model, LoRA, CacheSalt string
	InputTokens            int64
	TokenIDs               []uint32
}

// Rejection is one admission refusal of a failed Decide: the bucket, the engine and the cap.
type Rejection struct {
	Bucket string `json:"bucket"`
	Engine string `json:"engine"`
	Limit  string `json:"limit"`
}

// Sampling bounds: at most one sample per SampleEvery, of prompts of at most MaxSampleTokenIDs
// ids, at most SampleQueue waiting (64 KiB of ids each, 4 MiB in all); a full queue drops.
const (
	SampleEvery       = 10 * time.Millisecond
	MaxSampleTokenIDs = 16384
	SampleQueue       = 64
)

// TailSize is the number of recent decisions the tail keeps (a power of two).
const TailSize = 2048

// Tail is a fixed ring of the most recent decisions with a sequence number. Writers never wait
// for readers: Put is an atomic add for the number and a copy of the record into its slot (no
// allocation), guarded by the slot's own flag, which a reader holds only while it copies that
// one record out. A reader that falls more than TailSize behind loses the oldest records and is
// told how many. Readers poll (Since); nothing on the write path signals them.
type Tail struct {
	head  atomic.Uint64 // the last sequence number handed out
	slots [TailSize]slot

	lastSample atomic.Int64 // unix nanos of the last sample taken
	samples    chan Sample
}

// slot is one record of the ring; busy guards rec (a spin flag: held for one copy).
type slot struct {
	busy atomic.Bool
	rec  Record
}

func (s *slot) lock() {
	for i := 0; !s.busy.CompareAndSwap(false, true); i++ {
		if i > 16 {
			runtime.Gosched()
		}
	}
}

func (s *slot) unlock() { s.busy.Store(false) }

// NewTail returns an empty tail.
func NewTail() *Tail { return &Tail{samples: make(chan Sample, SampleQueue)} }

// Put appends a copy of r with the next sequence number and returns that number. r is not
// retained.
func (t *Tail) Put(r *Record) uint64 {
	seq := t.head.Add(1)
	s := &t.slots[seq&(TailSize-1)]
	s.lock()
	if s.rec.Seq < seq { // a writer one lap ahead may have been quicker: the newer record stays
		s.rec = *r
		s.rec.Seq = seq
	}
	s.unlock()
	return seq
}

// load copies slot i's record out.
func (t *Tail) load(i uint64) Record {
	s := &t.slots[i&(TailSize-1)]
	s.lock()
	r := s.rec
	s.unlock()
	return r
}

// Head is the last sequence number handed out (0 before the first Put).
func (t *Tail) Head() uint64 { return t.head.Load() }

// Since appends to out the records after sequence number after, oldest first, at most limit of
// them (limit <= 0: no bound), and returns them with the sequence number to pass next time and
// how many records were lost because they were overwritten before this read. A record whose
// writer has taken its number but not yet stored it ends the read; the next one picks it up.
func (t *Tail) Since(after uint64, limit int, out []Record) (recs []Record, next, lost uint64) {
	head := t.head.Load()
	if head > after+TailSize {
		lost = head - TailSize - after
		after = head - TailSize
	}
	next = after
	for s := after + 1; s <= head; s++ {
		if limit > 0 && len(out) >= limit {
			break
		}
		r := t.load(s)
		if r.Seq < s {
			break // taken, not yet stored
		}
		next = s
		if r.Seq > s {
			lost++ // overwritten since head was read
			continue
		}
		out = append(out, r)
	}
	return out, next, lost
}

// Get returns the record with sequence number seq while the tail still holds it.
func (t *Tail) Get(seq uint64) (Record, bool) {
	r := t.load(seq)
	if seq == 0 || r.Seq != seq {
		return Record{}, false
	}
	return r, true
}

// WantSample reports whether a decision at now (unix nanos) with n token ids should be
// offered as a Sample: at most one per SampleEvery wins.
func (t *Tail) WantSample(now int64, n int) bool {
	if n == 0 || n > MaxSampleTokenIDs {
		return false
	}
	last := t.lastSample.Load()
	return now-last >= int64(SampleEvery) && t.lastSample.CompareAndSwap(last, now)
}

// Offer queues s for the statistics, dropping it when the queue is full.
func (t *Tail) Offer(s Sample) {
	select {
	case t.samples <- s:
	default:
	}
}

package console

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/decider"
)

// Record is one Decide call as the console shows it. The decider's Decide path fills one per
// call (Tail.Put) and never touches it again, so readers share it without copying.
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

// Tail is a fixed ring of the most recent decisions with a sequence number. Writers never
// block and never wait for readers: Put is one atomic add and one atomic store; a reader that
// falls more than TailSize behind loses the oldest records and is told how many. Readers poll
// (Since); nothing on the write path signals them.
type Tail struct {
	head  atomic.Uint64 // the last sequence number handed out
	slots [TailSize]atomic.Pointer[Record]

	lastSample atomic.Int64 // unix nanos of the last sample taken
	samples    chan Sample
}

// NewTail returns an empty tail.
func NewTail() *Tail { return &Tail{samples: make(chan Sample, SampleQueue)} }

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

// Put appends r, setting r.Seq. r must not be changed afterwards.
func (t *Tail) Put(r *Record) {
	seq := t.head.Add(1)
	r.Seq = seq
	t.slots[seq&(TailSize-1)].Store(r)
}

// Head is the last sequence number handed out (0 before the first Put).
func (t *Tail) Head() uint64 { return t.head.Load() }

// Since appends to out the records after sequence number after, oldest first, at most limit of
// them (limit <= 0: no bound), and returns them with the sequence number to pass next time and
// how many records were lost because they were overwritten before this read. A record whose
// writer has taken its number but not yet stored it ends the read; the next one picks it up.
func (t *Tail) Since(after uint64, limit int, out []*Record) (recs []*Record, next, lost uint64) {
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
		r := t.slots[s&(TailSize-1)].Load()
		if r == nil || r.Seq < s {
			break // taken, not yet stored
		}
		if r.Seq > s {
			lost++ // overwritten since head was read
			next = s
			continue
		}
		out = append(out, r)
		next = s
	}
	return out, next, lost
}

// Get returns the record with sequence number seq while the tail still holds it.
func (t *Tail) Get(seq uint64) (*Record, bool) {
	r := t.slots[seq&(TailSize-1)].Load()
	if r == nil || r.Seq != seq {
		return nil, false
	}
	return r, true
}

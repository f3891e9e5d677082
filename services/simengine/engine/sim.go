package engine

import (
	"time"
)

// Sim is the engine model in discrete-event form: the same core (cache, admission, prefill and
// decode times, accounting) as Engine, advanced by its caller in virtual time instead of by
// goroutines sleeping on a Clock. A request arrives with Submit; Next tells when the next of its
// own events (a prefill ends, a run finishes) is due and Step processes the events up to a time.
// Config.Clock is unused. A Sim is not safe for concurrent use; it produces no output token ids.
type Sim struct {
	core
	nextID  uint64
	queue   []*SimRun
	running []*SimRun // in admission order
}

// SimRun is one request in a Sim. Its times are set as the run progresses.
type SimRun struct {
	ID uint64
	// Arrival, Admitted, FirstToken and Finished are when the request was submitted, took a
	// running slot, ended its prefill (its first token) and produced its last token; zero until
	// reached.
	Arrival, Admitted, FirstToken, Finished time.Time
	// CachedTokens are the prompt tokens found in the prefix cache when the prefill began.
	CachedTokens int
	// PromptTokens is the prompt length and MaxTokens the output length the run generates.
	PromptTokens, MaxTokens int

	prompt    []uint32
	lora      string
	salt      string
	hashes    []uint64
	estimate  int64
	kv        int64
	prefilled bool
}

// Done reports whether the run has finished.
func (r *SimRun) Done() bool { return !r.Finished.IsZero() }

// Result is the run's summary in the live engine's terms (no OutputIDs), valid once Done.
func (r *SimRun) Result() Result {
	return Result{PromptTokens: r.PromptTokens, CachedTokens: r.CachedTokens, CompletionTokens: r.MaxTokens,
		QueueTime: r.Admitted.Sub(r.Arrival), PrefillTime: r.FirstToken.Sub(r.Admitted), Duration: r.Finished.Sub(r.Arrival),
		FinishReason: "length"}
}

// NewSim returns an idle simulated engine with an empty cache.
func NewSim(cfg Config) (*Sim, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sim{core: newCore(cfg.withDefaults())}, nil
}

// Config returns the engine's configuration with defaults applied.
func (s *Sim) Config() Config { return s.cfg }

// Submit is the arrival of req at now. Events before now must have been stepped first. The
// request starts at once when a slot is free, the prefill server idle and nobody waits, else it
// queues (FIFO). The Sim
// keeps req.TokenIDs until the run finishes and does not modify them.
func (s *Sim) Submit(now time.Time, req Request) (*SimRun, error) {
	maxTokens, hashes, err := s.prepare(req)
	if err != nil {
		return nil, err
	}
	s.nextID++
	r := &SimRun{ID: s.nextID, Arrival: now, PromptTokens: len(req.TokenIDs), MaxTokens: maxTokens, prompt: req.TokenIDs, lora: req.LoRAName,
		salt: req.CacheSalt, hashes: hashes}
	if s.admitsAt(len(s.queue)) {
		s.start(now, r)
		return r, nil
	}
	r.estimate = s.enqueue(len(r.prompt), r.hashes)
	s.queue = append(s.queue, r)
	return r, nil
}

// start admits r at now and begins its prefill, as Engine's admitLocked does.
func (s *Sim) start(now time.Time, r *SimRun) {
	r.kv = s.admit(len(r.prompt))
	r.Admitted = now
	cached, prefill := s.beginPrefill(now, len(r.prompt), r.hashes)
	r.CachedTokens = cached
	r.FirstToken = now.Add(prefill)
	s.running = append(s.running, r)
}

// startQueued starts queued runs at now while the head may start (one at a time behind the
// prefill server; on a decode engine, one per free slot).
func (s *Sim) startQueued(now time.Time) {
	for s.canStart() && len(s.queue) > 0 {
		next := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.dequeue(next.estimate)
		s.start(now, next)
	}
}

// finishAt is when a prefilled run produces its last token.
func (s *Sim) finishAt(r *SimRun) time.Time {
	return r.FirstToken.Add(time.Duration(r.MaxTokens-1) * s.tpot())
}

// due is when r's next event is.
func (s *Sim) due(r *SimRun) time.Time {
	if !r.prefilled {
		return r.FirstToken
	}
	return s.finishAt(r)
}

// Next returns when the earliest pending event is due; false when nothing runs.
func (s *Sim) Next() (time.Time, bool) {
	var best time.Time
	for i, r := range s.running {
		if t := s.due(r); i == 0 || t.Before(best) {
			best = t
		}
	}
	return best, len(s.running) > 0
}

// Step processes every event due at or before now, earliest first (ties in admission order),
// and returns the runs that finished, in finishing order. KV events reach the Sink as they occur.
func (s *Sim) Step(now time.Time) []*SimRun {
	var done []*SimRun
	for {
		idx := -1
		var at time.Time
		for i, r := range s.running {
			if t := s.due(r); !t.After(now) && (idx < 0 || t.Before(at)) {
				idx, at = i, t
			}
		}
		if idx < 0 {
			return done
		}
		r := s.running[idx]
		if !r.prefilled {
			// Prefill done: blocks stored, first token out, decoding begins, and the prefill
			// server takes the head of the queue.
			r.prefilled = true
			s.endPrefill(r.prompt, r.hashes, r.lora, r.salt, len(r.prompt)-r.CachedTokens, r.FirstToken.Sub(r.Admitted))
			s.decoding++
			s.startQueued(at)
			continue
		}
		// Last token: the run frees its slot, which goes to the head of the queue.
		r.Finished = at
		s.decoding--
		s.release(r.kv)
		s.running = append(s.running[:idx], s.running[idx+1:]...)
		r.prompt, r.hashes = nil, nil
		done = append(done, r)
		s.startQueued(at)
	}
}

// Load returns the load at now (events up to now stepped), as Engine.Load would report it:
// generated tokens of decoding runs count in the KV tokens used.
func (s *Sim) Load(now time.Time) Load {
	var generated int64
	tpot := s.tpot()
	for _, r := range s.running {
		if !r.prefilled || now.Before(r.FirstToken) {
			continue
		}
		n := int64(r.MaxTokens)
		if tpot > 0 {
			n = min(n, 1+int64(now.Sub(r.FirstToken)/tpot))
		}
		generated += n
	}
	return s.load(now, len(s.queue), generated)
}

// CachedPrefixIn is Engine.CachedPrefixIn.
func (s *Sim) CachedPrefixIn(tokens []uint32, lora, salt string) int {
	if s.cfg.Role == RoleDecode {
		return 0
	}
	return s.cachedPrefix(s.cache.chain(tokens, lora, salt))
}

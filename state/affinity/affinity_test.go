package affinity

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type clock struct{ t atomic.Int64 }

func (c *clock) now() time.Time          { return time.Unix(0, c.t.Load()) }
func (c *clock) advance(d time.Duration) { c.t.Add(int64(d)) }

func newStore(t testing.TB) (*Store, *clock) {
	t.Helper()
	c := &clock{}
	c.t.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	s, err := New(Config{}, c.now)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

func TestScopesNeverCollide(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	scopes := []Scope{
		{Model: "ab", Bucket: "c", Stage: 1, Key: "k"},
		{Model: "a", Bucket: "bc", Stage: 1, Key: "k"},
		{Model: "a", Bucket: "b", Stage: 1, Key: "ck"},
		{Model: "a", Bucket: "b", Stage: 2, Key: "ck"},
		{Model: "a\x01b", Bucket: "", Stage: 1, Key: "k"},
		{Model: "a", Bucket: "\x01b", Stage: 1, Key: "k"},
	}
	for i, sc := range scopes {
		if _, won, err := s.Bind(sc, "", fmt.Sprint("e", i), time.Minute); !won || err != nil {
			t.Fatalf("Bind(%+v) lost or failed: %v", sc, err)
		}
	}
	for i, sc := range scopes {
		if got, ok := s.Get(sc); !ok || got != fmt.Sprint("e", i) {
			t.Errorf("Get(%+v) = %q, %v; want e%d", sc, got, ok, i)
		}
	}
}

func TestBindFirstWins(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	sc := Scope{Model: "m", Bucket: "b", Stage: 1, Key: "session-1"}
	if got, won, _ := s.Bind(sc, "", "a", time.Minute); !won || got != "a" {
		t.Fatalf("first Bind = %q, %v", got, won)
	}
	if got, won, _ := s.Bind(sc, "", "b", time.Minute); won || got != "a" {
		t.Errorf("second first-Bind = %q, %v; want a, false", got, won)
	}
	if got, won, _ := s.Bind(sc, "a", "b", time.Minute); !won || got != "b" {
		t.Errorf("replacing Bind = %q, %v; want b, true", got, won)
	}
}

func TestConcurrentFirstBindersConverge(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	sc := Scope{Model: "m", Bucket: "b", Stage: 1, Key: "k"}
	var wg sync.WaitGroup
	results := make([]string, 32)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, _ := s.Bind(sc, "", fmt.Sprint("e", i), time.Minute)
			results[i] = got
		}()
	}
	wg.Wait()
	for _, r := range results {
		if r != results[0] {
			t.Fatalf("binders diverged: %v", results)
		}
	}
}

func TestIdleExpiry(t *testing.T) {
	t.Parallel()
	s, c := newStore(t)
	sc := Scope{Model: "m", Key: "k"}
	_, _, _ = s.Bind(sc, "", "a", 10*time.Second)
	c.advance(9 * time.Second)
	if _, ok := s.Get(sc); !ok {
		t.Fatal("binding expired before its idle time")
	}
	c.advance(9 * time.Second) // Get refreshed the timer: 9s idle again, still live
	if _, ok := s.Get(sc); !ok {
		t.Fatal("Get did not refresh the idle timer")
	}
	c.advance(11 * time.Second)
	if _, ok := s.Get(sc); ok {
		t.Error("binding idle for 11s of 10s still readable")
	}
	if got, won, _ := s.Bind(sc, "", "b", 10*time.Second); !won || got != "b" {
		t.Errorf("Bind over an expired binding = %q, %v; want b, true", got, won)
	}
	c.advance(11 * time.Second)
	if n := s.Sweep(); n != 1 || s.Len() != 0 || s.Expired() != 1 {
		t.Errorf("Sweep() = %d, Len %d, Expired %d; want 1, 0, 1", n, s.Len(), s.Expired())
	}
}

func TestInvalidateEngine(t *testing.T) {
	t.Parallel()
	s, _ := newStore(t)
	for i := range 10 {
		engine := "a"
		if i%2 == 1 {
			engine = "b"
		}
		_, _, _ = s.Bind(Scope{Model: "m", Key: fmt.Sprint(i)}, "", engine, time.Minute)
	}
	if n := s.InvalidateEngine("a"); n != 5 || s.Len() != 5 {
		t.Errorf("InvalidateEngine(a) = %d, Len %d; want 5, 5", n, s.Len())
	}
	if _, ok := s.Get(Scope{Model: "m", Key: "0"}); ok {
		t.Error("binding to a removed engine survived")
	}
}

func TestFull(t *testing.T) {
	t.Parallel()
	s, err := New(Config{MaxBindings: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = s.Bind(Scope{Key: "1"}, "", "a", time.Minute)
	if _, _, err := s.Bind(Scope{Key: "2"}, "", "a", time.Minute); !errors.Is(err, ErrFull) {
		t.Errorf("Bind beyond MaxBindings = %v, want ErrFull", err)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	t.Parallel()
	s, err := New(Config{SweepInterval: time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, _ = s.Bind(Scope{Key: "x"}, "", "a", time.Nanosecond)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for s.Len() != 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || s.Len() != 0 {
		t.Errorf("Run = %v with %d bindings left; want Canceled and 0", err, s.Len())
	}
}

func BenchmarkGet(b *testing.B) {
	s, _ := newStore(b)
	for i := range 100000 {
		_, _, _ = s.Bind(Scope{Model: "m", Bucket: "b", Stage: 1, Key: fmt.Sprint("session-", i)}, "", "e", time.Hour)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Get(Scope{Model: "m", Bucket: "b", Stage: 1, Key: "session-12345"})
			i++
		}
	})
}

func BenchmarkBind(b *testing.B) {
	s, _ := newStore(b)
	keys := make([]string, 1<<16)
	for i := range keys {
		keys[i] = fmt.Sprint("session-", i)
	}
	b.ReportAllocs()
	var n atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := n.Add(1)
			_, _, _ = s.Bind(Scope{Model: "m", Bucket: "b", Stage: 1, Key: keys[i&(1<<16-1)]}, "", "e", time.Hour)
		}
	})
}

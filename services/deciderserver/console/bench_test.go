package console

import (
	"encoding/json"
	"testing"
	"time"
)

// BenchmarkStreamRecord is what the decision stream spends per decision it sends: the copy out
// of the ring (Since) and the JSON encoding, on the stream's goroutine, off the Decide path.
func BenchmarkStreamRecord(b *testing.B) {
	tail := NewTail()
	rec := Record{At: time.Now(), TookMicros: 42, Model: "sim-chat", RequestID: "656047c855568ffeb8b6aa001a4e27a2", InputTokens: 1200,
		PeakTokens: 1700, Bucket: "plain", ConfigVersion: 3, Engine: "plain-1", Reason: "cache_candidate"}
	for range TailSize {
		tail.Put(&rec)
	}
	buf := make([]Record, 0, 256)
	next := tail.Head() - 256
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if i%256 == 0 {
			buf, _, _ = tail.Since(next, 256, buf[:0])
		}
		if _, err := json.Marshal(&buf[i%256]); err != nil {
			b.Fatal(err)
		}
	}
}

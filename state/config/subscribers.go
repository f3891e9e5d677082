package config

import "sync"

// Subscribers fans configuration snapshots out to subscribers with latest-wins delivery: each
// subscriber's channel holds one snapshot, and a slow reader sees only the newest. Every Store
// implementation uses it for Subscribe. The zero value is ready to use; it is safe for
// concurrent use, but Publish calls must be ordered by the caller (stores publish under their
// own write lock) so a newer snapshot is never overwritten by an older one.
type Subscribers struct {
	mu   sync.Mutex
	subs map[int]chan Snapshot
	next int
}

// Subscribe returns a channel receiving each published snapshot and an idempotent func that
// unsubscribes and closes the channel.
func (s *Subscribers) Subscribe() (<-chan Snapshot, func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.subs == nil {
		s.subs = map[int]chan Snapshot{}
	}
	id := s.next
	s.next++
	ch := make(chan Snapshot, 1)
	s.subs[id] = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			delete(s.subs, id)
			close(ch)
		})
	}
}

// Publish delivers snap to every subscriber, replacing a snapshot it has not read yet.
func (s *Subscribers) Publish(snap Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.subs {
		select {
		case ch <- snap:
		default:
			// Full: replace the stale snapshot. Only Publish sends, under mu, so after the
			// drain the send cannot block.
			select {
			case <-ch:
			default:
			}
			ch <- snap
		}
	}
}

package simengine

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/google/go-cmp/cmp"

	"github.com/sluicehq/sluice/components/kvwire"
	"github.com/sluicehq/sluice/internal/silentpeer"
	"github.com/sluicehq/sluice/state/kvevents"
)

func zmqConfig(format string) Config {
	cfg := testConfig()
	cfg.KVInterval = 5 * time.Millisecond
	cfg.BlockSize = 4
	cfg.KVEventsFormat = format
	return cfg
}

// waitSubscribed waits until the sim's PUB socket holds a subscription: ZMQ drops what a PUB
// sends before that, and the test wants the stream from seq 0.
func waitSubscribed(ctx context.Context, t *testing.T, s *Server, rank int) {
	t.Helper()
	for !s.kvZMQ[rank].subscribed() {
		if ctx.Err() != nil {
			t.Fatal("no subscription reached the sim's PUB socket")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// kvMessage is one received PUB message.
type kvMessage struct {
	topic   string
	seq     uint64
	payload []byte
	batch   kvevents.Batch
}

// receiveEvents reads PUB messages until they hold n events, checking the 3-frame layout and
// that every payload decodes with components/kvwire without skipped or ignored records.
func receiveEvents(t *testing.T, sub zmq4.Socket, n int) []kvMessage {
	t.Helper()
	var out []kvMessage
	for got := 0; got < n; {
		msg, err := sub.Recv()
		if err != nil {
			t.Fatalf("SUB receive after %d of %d events: %v", got, n, err)
		}
		if len(msg.Frames) != 3 || len(msg.Frames[1]) != 8 {
			t.Fatalf("message of %d frames %q: want [topic, 8-byte seq, payload]", len(msg.Frames), msg.Frames)
		}
		b, err := kvwire.DecodeMsgpack(msg.Frames[2])
		if err != nil {
			t.Fatalf("DecodeMsgpack(seq %d): %v", binary.BigEndian.Uint64(msg.Frames[1]), err)
		}
		if len(b.Skipped) != 0 {
			t.Fatalf("DecodeMsgpack skipped %v; want none", b.Skipped)
		}
		out = append(out, kvMessage{topic: string(msg.Frames[0]), seq: binary.BigEndian.Uint64(msg.Frames[1]), payload: msg.Frames[2], batch: b})
		got += len(b.Events)
	}
	return out
}

// storeAndClear makes the sim store blocks [1 2 3 4][5 6 7 8], then [1 2 3 4][50 60 70 80]
// (the first block a hit), then drop its cache: three events.
func storeAndClear(t *testing.T, s *Server, base string) {
	t.Helper()
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 5, 6, 7, 8, 9}, "max_tokens": 1})
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4, 50, 60, 70, 80}, "max_tokens": 1})
	s.Engine().Reset()
}

// checkStoreAndClear checks the events of storeAndClear as the decider decodes them.
func checkStoreAndClear(t *testing.T, msgs []kvMessage, topic string) {
	t.Helper()
	var evs []kvevents.Event
	for i, m := range msgs {
		if m.topic != topic {
			t.Errorf("message %d topic %q, want %q", i, m.topic, topic)
		}
		if m.seq != uint64(i) {
			t.Errorf("message %d seq %d, want %d (from 0, +1 per batch)", i, m.seq, i)
		}
		if !m.batch.HasRank || m.batch.DPRank != 0 {
			t.Errorf("message %d dp rank %d (present %v), want 0", i, m.batch.DPRank, m.batch.HasRank)
		}
		evs = append(evs, m.batch.Events...)
	}
	got := project(t, evs)
	if len(got) != 3 || len(got[0].Hashes) != 2 {
		t.Fatalf("events %+v: want BlockStored (2 blocks), BlockStored, AllBlocksCleared", got)
	}
	first := got[0].Hashes
	want := []decodedEvent{
		{Kind: kvevents.KindBlockStored, Hashes: first, Tokens: []uint32{1, 2, 3, 4, 5, 6, 7, 8}, BlockSize: 4},
		{Kind: kvevents.KindBlockStored, Hashes: got[1].Hashes, Parent: first[0], HasParent: true, Tokens: []uint32{50, 60, 70, 80}, BlockSize: 4},
		{Kind: kvevents.KindAllBlocksCleared},
	}
	if diff := cmp.Diff(want, got); diff != "" || len(got[1].Hashes) != 1 {
		t.Errorf("events mismatch (-want +got):\n%s", diff)
	}
}

// replay asks the replay socket for the batches from seq from and returns the replies up to
// and including the end marker.
func replay(ctx context.Context, t *testing.T, endpoint string, from uint64) []zmq4.Msg {
	t.Helper()
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(endpoint); err != nil {
		t.Fatalf("dial replay %s: %v", endpoint, err)
	}
	var start [8]byte
	binary.BigEndian.PutUint64(start[:], from)
	if err := dealer.Send(zmq4.NewMsgFrom([]byte{}, start[:])); err != nil {
		t.Fatal(err)
	}
	var out []zmq4.Msg
	for {
		msg, err := dealer.Recv()
		if err != nil {
			t.Fatalf("replay receive after %d replies: %v", len(out), err)
		}
		out = append(out, msg)
		for _, f := range msg.Frames {
			if bytes.Equal(f, replayEnd) {
				return out
			}
		}
	}
}

// checkReplay checks the replies to a replay from seq from: the live messages msgs from that
// seq, byte for byte, in the engine's framing, then the end marker.
func checkReplay(t *testing.T, format string, got []zmq4.Msg, msgs []kvMessage, topic string, from uint64) {
	t.Helper()
	var want [][][]byte
	for _, m := range msgs {
		if m.seq < from {
			continue
		}
		var seq [8]byte
		binary.BigEndian.PutUint64(seq[:], m.seq)
		if format == KVEventsSGLang {
			want = append(want, [][]byte{{}, seq[:], m.payload})
		} else {
			want = append(want, [][]byte{{}, []byte(topic), seq[:], m.payload})
		}
	}
	if format == KVEventsSGLang {
		want = append(want, [][]byte{{}, replayEnd, {}})
	} else {
		want = append(want, [][]byte{{}, {}, replayEnd, {}})
	}
	var frames [][][]byte
	for _, m := range got {
		frames = append(frames, m.Frames)
	}
	if diff := cmp.Diff(want, frames, cmp.Comparer(bytes.Equal)); diff != "" {
		t.Errorf("replay from %d mismatch (-want +got):\n%s", from, diff)
	}
}

// TestKVEventsZMQ runs the real wire end to end in both topologies: the sim binds its PUB
// (a subscriber connects) or connects to a subscriber that binds, as enginelink's bound mode
// does. It checks frames, seq from 0, decoding by the decider's decoder, and replay.
func TestKVEventsZMQ(t *testing.T) {
	for _, tc := range []struct {
		name, format, topic string
		simBinds            bool
	}{
		{"vllm_sim_binds", KVEventsVLLM, "", true},
		{"sglang_sim_binds", KVEventsSGLang, "", true},
		{"vllm_sim_connects", KVEventsVLLM, "kv@sim-test@m", false},
		{"sglang_sim_connects", KVEventsSGLang, "kv@sim-test@m", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cfg := zmqConfig(tc.format)
			cfg.KVEventsTopic = tc.topic
			cfg.KVReplayEndpoint = "tcp://127.0.0.1:0"
			sub := zmq4.NewSub(ctx)
			defer sub.Close()
			if err := sub.SetOption(zmq4.OptionSubscribe, tc.topic); err != nil {
				t.Fatal(err)
			}
			if tc.simBinds {
				cfg.KVEventsEndpoint = "tcp://*:0"
			} else {
				if err := sub.Listen("tcp://127.0.0.1:0"); err != nil {
					t.Fatal(err)
				}
				cfg.KVEventsEndpoint = "tcp://" + sub.Addr().String()
			}
			s, base := start(t, cfg)
			pubEP, replayEP, err := s.KVEventsEndpoints(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.simBinds {
				if !strings.HasPrefix(pubEP, "tcp://127.0.0.1:") || strings.HasSuffix(pubEP, ":0") {
					t.Fatalf("KVEventsEndpoints pub = %q, want the bound tcp://127.0.0.1:PORT", pubEP)
				}
				if err := sub.Dial(pubEP); err != nil {
					t.Fatal(err)
				}
			} else if pubEP != cfg.KVEventsEndpoint {
				t.Fatalf("KVEventsEndpoints pub = %q, want %q", pubEP, cfg.KVEventsEndpoint)
			}
			waitSubscribed(ctx, t, s, 0)

			storeAndClear(t, s, base)
			msgs := receiveEvents(t, sub, 3)
			checkStoreAndClear(t, msgs, tc.topic)
			for _, from := range []uint64{0, uint64(len(msgs) - 1), uint64(len(msgs)), 1 << 40} {
				checkReplay(t, tc.format, replay(ctx, t, replayEP, from), msgs, tc.topic, from)
			}
		})
	}
}

func TestZMQEndpointRules(t *testing.T) {
	for _, tc := range []struct {
		endpoint string
		rank     int
		want     string
		binds    bool
	}{
		{"tcp://*:5557", 0, "tcp://*:5557", true},
		{"tcp://*:5557", 3, "tcp://*:5560", true},
		{"tcp://enginelink:5557", 1, "tcp://enginelink:5558", false},
		{"tcp://[::]:5557", 2, "tcp://[::]:5559", true},
		{"ipc:///tmp/kv", 1, "ipc:///tmp/kv_dp1", true},
		{"inproc://kv", 2, "inproc://kv_dp2", true},
	} {
		got, err := offsetEndpoint(tc.endpoint, tc.rank)
		if err != nil || got != tc.want {
			t.Errorf("offsetEndpoint(%q, %d) = %q, %v; want %q", tc.endpoint, tc.rank, got, err, tc.want)
		}
		if b := zmqBinds(got); b != tc.binds {
			t.Errorf("zmqBinds(%q) = %v, want %v", got, b, tc.binds)
		}
	}
	if _, err := offsetEndpoint("udp://x:1", 1); err == nil {
		t.Error("offsetEndpoint(udp://x:1, 1): want an error")
	}
}

func TestReplayBufferKeepsTheLastBatches(t *testing.T) {
	p := &zmqKVPublisher{bufferSteps: 3}
	for seq := range uint64(5) {
		p.remember(seq, []byte{byte(seq)})
	}
	var got []uint64
	for _, e := range p.buffered(0) {
		got = append(got, e.seq)
	}
	if diff := cmp.Diff([]uint64{2, 3, 4}, got); diff != "" {
		t.Errorf("buffered(0) seqs mismatch (-want +got):\n%s", diff)
	}
	if n := len(p.buffered(4)); n != 1 {
		t.Errorf("buffered(4) = %d batches, want 1", n)
	}
	if n := len(p.buffered(5)); n != 0 {
		t.Errorf("buffered(5) = %d batches, want 0", n)
	}
}

// TestKVEventsReconnect restarts the bound subscriber the sim connects to: the sim redials it
// and the stream goes on where it was (seq does not restart, it is the same engine process),
// so the new subscriber sees a seq jump, the cue to replay.
func TestKVEventsReconnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bindSub := func(endpoint string) zmq4.Socket {
		sub := zmq4.NewSub(ctx)
		if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
			t.Fatal(err)
		}
		if err := sub.Listen(endpoint); err != nil {
			t.Fatal(err)
		}
		return sub
	}
	first := bindSub("tcp://127.0.0.1:0")
	endpoint := "tcp://" + first.Addr().String()
	cfg := zmqConfig(KVEventsVLLM)
	cfg.KVEventsEndpoint = endpoint
	s, base := start(t, cfg)
	waitSubscribed(ctx, t, s, 0)
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 1})
	if m := receiveEvents(t, first, 1); m[0].seq != 0 {
		t.Fatalf("first subscriber: seq %d, want 0", m[0].seq)
	}
	first.Close()
	for s.kvZMQ[0].subscribed() {
		if ctx.Err() != nil {
			t.Fatal("the sim kept the closed subscriber's subscription")
		}
		time.Sleep(2 * time.Millisecond)
	}
	// Published while nobody listens: lost, as with a real engine.
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{5, 6, 7, 8}, "max_tokens": 1})
	second := bindSub(endpoint)
	defer second.Close()
	waitSubscribed(ctx, t, s, 0)
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{9, 10, 11, 12}, "max_tokens": 1})
	m := receiveEvents(t, second, 1)[0]
	if m.seq < 1 {
		t.Errorf("after the subscriber restarted: seq %d, want the stream to go on (≥ 1)", m.seq)
	}
	if st := m.batch.Events[0].Stored; st == nil || st.TokenIDs[0] != 9 && st.TokenIDs[0] != 5 {
		t.Errorf("after the subscriber restarted: event %+v", m.batch.Events[0])
	}
}

// TestKVEventsRedialAfterAFailedHandshake points a connecting sim at a port whose listener
// completes the TCP connect and then drops it before the ZMTP greeting — what a subscriber
// restarting on the same port does to a redial that hits its closing listener. The sim keeps
// redialling (zmq4's own reconnect gave up for good on the first such handshake), so the real
// subscriber that then binds the port gets the stream.
func TestKVEventsRedialAfterAFailedHandshake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "tcp://" + ln.Addr().String()
	dropped := make(chan struct{}, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
			select {
			case dropped <- struct{}{}:
			default:
			}
		}
	}()
	cfg := zmqConfig(KVEventsVLLM)
	cfg.KVEventsEndpoint = endpoint
	s, base := start(t, cfg)
	for range 2 { // two handshakes failed: the sim dialled again after the first
		select {
		case <-dropped:
		case <-ctx.Done():
			t.Fatal("the sim stopped dialling after a failed handshake")
		}
	}
	_ = ln.Close()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen(endpoint); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(ctx, t, s, 0)
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 1})
	if m := receiveEvents(t, sub, 1)[0]; m.batch.Events[0].Stored == nil {
		t.Errorf("first event %+v, want the stored block", m.batch.Events[0])
	}
}

// TestKVEventsDialOfASilentSubscriber points connecting sims at ports that accept the
// connection and never send a ZMTP greeting (a wedged subscriber, whose kernel still completes
// the TCP handshake; a -kv-events-endpoint naming some other port). Each dial gives up within
// pubDialTimeout instead of holding keepConnected in Dial: the silent peer is given one
// connection at a time, the real subscriber that binds the port once the silent one goes away
// gets the stream, and a sim whose subscriber is still silent stops when asked. The old code
// waited in Dial for the greeting, and its Run did not return.
func TestKVEventsDialOfASilentSubscriber(t *testing.T) {
	defer func(d time.Duration) { pubDialTimeout = d }(pubDialTimeout)
	pubDialTimeout = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	moved, still := silentpeer.Listen(t), silentpeer.Listen(t)
	cfg := zmqConfig(KVEventsVLLM)
	cfg.KVEventsEndpoint = moved.Endpoint
	s, base := start(t, cfg)
	cfg.KVEventsEndpoint = still.Endpoint
	stuck, err := New(slog.New(slog.DiscardHandler), cfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(context.Background())
	defer stop()
	done := make(chan error, 1)
	go func() { done <- stuck.Run(sctx) }()

	for moved.Accepted() < 1 || still.Accepted() < 1 {
		if ctx.Err() != nil {
			t.Fatal("the sims did not dial their silent subscribers")
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // several dial bounds and redials
	if n := still.Accepted(); n != 1 {
		t.Errorf("the silent peer took %d connections, want 1: a dial must not open another while an earlier one still waits for the greeting", n)
	}

	moved.HangUp()
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, ""); err != nil {
		t.Fatal(err)
	}
	if err := sub.Listen(moved.Endpoint); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(ctx, t, s, 0)
	post(t, base+"/v1/completions", map[string]any{"prompt": []int{1, 2, 3, 4}, "max_tokens": 1})
	if m := receiveEvents(t, sub, 1)[0]; m.batch.Events[0].Stored == nil {
		t.Errorf("first event %+v, want the stored block", m.batch.Events[0])
	}

	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation: the PUB dial to the silent subscriber still waits for its greeting")
	}
}

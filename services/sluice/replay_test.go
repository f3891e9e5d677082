package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	sluicev1 "github.com/sluicehq/sluice/gen/sluice/v1"
	"github.com/sluicehq/sluice/internal/testenv"
)

// TestReplayCommand produces KV batches to a real broker and replays the topic with the CLI.
func TestReplayCommand(t *testing.T) {
	brokers := testenv.KafkaBrokers(t)
	topic := fmt.Sprint("replay-cli-", time.Now().UnixNano())
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var recs []*kgo.Record
	for i, engine := range []string{"e1", "e2"} {
		toks := make([]uint32, 32)
		for j := range toks {
			toks[j] = uint32(i*100 + j)
		}
		v, _ := proto.Marshal(&sluicev1.KvEventBatch{EngineId: engine, Epoch: 1, Seq: 1, Model: "m",
			Events: []*sluicev1.KvEvent{{Event: &sluicev1.KvEvent_BlockStored{BlockStored: &sluicev1.BlockStored{
				BlockHashes: []uint64{uint64(i*10 + 1), uint64(i*10 + 2)}, TokenIds: toks, BlockSize: 16}}}}})
		recs = append(recs, &kgo.Record{Key: []byte(engine), Value: v})
	}
	recs = append(recs, &kgo.Record{Key: []byte("e3"), Value: []byte("not a protobuf")})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	stdout = &out
	defer func() { stdout = os.Stdout }()
	if err := run(ctx, []string{"replay", "-kafka-brokers", strings.Join(brokers, ","), "-topic", topic, "-log-level", "error"}, io.Discard); err != nil {
		t.Fatalf("replay: %v", err)
	}
	got := out.String()
	for _, want := range []string{"records: 3", "engines: 2", "blocks stored: 4", "bad malformed_protobuf: 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("replay summary lacks %q:\n%s", want, got)
		}
	}
	t.Logf("replay summary:\n%s", got)
}

package kafkadev

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKafkaGoConsumesFromKfake checks that segmentio/kafka-go (the ingest
// consumer) speaks to kfake: metadata lists the pre-created partitions and a
// partition reader reads what franz-go produced.
func TestKafkaGoConsumesFromKfake(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Start(ctx, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	c := &kafka.Client{Addr: kafka.TCP(b.Addr()...)}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{LoadTopic, KVTopic}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tp := range md.Topics {
		if tp.Error != nil || len(tp.Partitions) != Partitions {
			t.Errorf("topic %s: %d partitions, error %v; want %d", tp.Name, len(tp.Partitions), tp.Error, Partitions)
		}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for i := range 3 {
		r := &kgo.Record{Topic: KVTopic, Partition: 2, Key: []byte("engine"), Value: []byte{byte(i)},
			Headers: []kgo.RecordHeader{{Key: "sluice-format", Value: []byte("vllm.msgpack")}}}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	rd := kafka.NewReader(kafka.ReaderConfig{Brokers: b.Addr(), Topic: KVTopic, Partition: 2, MaxWait: 50 * time.Millisecond})
	defer rd.Close()
	if err := rd.SetOffset(1); err != nil {
		t.Fatal(err)
	}
	for want := 1; want < 3; want++ {
		m, err := rd.FetchMessage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if m.Offset != int64(want) || m.Value[0] != byte(want) || len(m.Headers) != 1 || m.HighWaterMark != 3 {
			t.Errorf("message %+v: want offset %d with one header and high watermark 3", m, want)
		}
	}
}

func TestAutoCreate(t *testing.T) {
	b, err := Start(context.Background(), slog.New(slog.DiscardHandler), "only")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: "fresh", Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce to an auto-created topic: %v", err)
	}
	b.Close() // idempotent
}

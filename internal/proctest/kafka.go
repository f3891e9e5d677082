package proctest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
)

// TopicPartitions is the partition count of the topics CreateTopics creates; it matches
// the test broker's auto-created topics.
const TopicPartitions = 4

// CreateTopics creates the run's topics (so the decider's consumers find their partitions
// at once), waits until every partition has a leader, and deletes them when the test ends.
func CreateTopics(t testing.TB, brokers []string, topics ...string) {
	t.Helper()
	c := &kafka.Client{Addr: kafka.TCP(brokers...), Timeout: 30 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &kafka.CreateTopicsRequest{}
	for _, topic := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: topic, NumPartitions: TopicPartitions, ReplicationFactor: 1})
	}
	resp, err := c.CreateTopics(ctx, req)
	if err != nil {
		t.Fatalf("create topics %v: %v", topics, err)
	}
	for topic, err := range resp.Errors {
		if err != nil {
			t.Fatalf("create topic %s: %v", topic, err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: topics})
	})
	Eventually(t, 50*time.Millisecond, 30*time.Second, "topics have partition leaders", func() (bool, string) {
		md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, mt := range md.Topics {
			if mt.Error != nil || len(mt.Partitions) != TopicPartitions {
				continue
			}
			led := true
			for _, p := range mt.Partitions {
				led = led && p.Error == nil && p.Leader.ID >= 0
			}
			if led {
				ready++
			}
		}
		return ready == len(topics), fmt.Sprintf("%d of %d topics ready", ready, len(topics))
	})
}

// RandomSuffix returns a string unique to this run (time and random bytes), for topic
// names and prompts no earlier run has seen.
func RandomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().Unix(), 36) + "-" + hex.EncodeToString(b[:])
}

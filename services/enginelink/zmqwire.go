package enginelink

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// endSeq is the seq of the replay socket's end marker.
const endSeq = math.MaxUint64

// errBadFrames marks a ZMQ message that is not [topic, 8-byte seq, payload].
var errBadFrames = errors.New("not a [topic, 8-byte big-endian seq, payload] message")

// parseLive splits a live PUB message into topic, seq and payload.
func parseLive(frames [][]byte) (topic string, seq uint64, payload []byte, err error) {
	if len(frames) != 3 || len(frames[1]) != 8 {
		return "", 0, nil, fmt.Errorf("%w: %d frames", errBadFrames, len(frames))
	}
	return string(frames[0]), binary.BigEndian.Uint64(frames[1]), frames[2], nil
}

// parseReplay splits one replay reply: [empty, topic, seq, payload] (the delimiter may already be
// stripped, and the topic frame may be absent as in older engines).
func parseReplay(frames [][]byte) (seq uint64, payload []byte, err error) {
	if len(frames) > 0 && len(frames[0]) == 0 && (len(frames) == 4 || len(frames) == 3 && len(frames[1]) == 8) {
		frames = frames[1:]
	}
	switch {
	case len(frames) == 3 && len(frames[1]) == 8:
		return binary.BigEndian.Uint64(frames[1]), frames[2], nil
	case len(frames) == 2 && len(frames[0]) == 8:
		return binary.BigEndian.Uint64(frames[0]), frames[1], nil
	}
	return 0, nil, fmt.Errorf("replay reply: want [empty, topic, seq, payload], got %d frames", len(frames))
}

// batchRank reads the DP rank of a msgpack KV batch without decoding its events: the third
// element of the array form or the "data_parallel_rank" key of the map form. ok is false when
// the batch carries none (older engines) or is not a batch.
func batchRank(payload []byte) (rank int, ok bool) {
	d := msgpack.NewDecoder(bytes.NewReader(payload))
	c, err := d.PeekCode()
	if err != nil {
		return 0, false
	}
	switch {
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil || n < 3 {
			return 0, false
		}
		for range 2 { // ts, events
			if d.Skip() != nil {
				return 0, false
			}
		}
		return decodeRank(d)
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return 0, false
		}
		for range n {
			k, err := d.DecodeString()
			if err != nil {
				return 0, false
			}
			if k == "data_parallel_rank" {
				return decodeRank(d)
			}
			if d.Skip() != nil {
				return 0, false
			}
		}
	}
	return 0, false
}

func decodeRank(d *msgpack.Decoder) (int, bool) {
	c, err := d.PeekCode()
	if err != nil || c == msgpcode.Nil {
		return 0, false
	}
	v, err := d.DecodeInt64()
	if err != nil || v < 0 || v > 1<<16 {
		return 0, false
	}
	return int(v), true
}

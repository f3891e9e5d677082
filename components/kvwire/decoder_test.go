package kvwire

import (
	"bytes"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/segmentio/kafka-go"
	"google.golang.org/protobuf/proto"

	"github.com/sluicehq/sluice/components/kvwire/engineenc"
)

// TestDecoderMatchesDecodeRecord decodes a stream of records (valid,
// invalid and corrupted, in every format, of a few engines) with one
// Decoder, reusing its buffers, and with DecodeRecord: each Record must be
// the same, read before the next call.
func TestDecoderMatchesDecodeRecord(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	seeds := onePassSeeds(t)
	pv, err := proto.Marshal(pbStored("e", 0, 1, 1, 5, 3))
	if err != nil {
		t.Fatal(err)
	}
	var d Decoder
	for i := range 20000 {
		value := seeds[rng.IntN(len(seeds))]
		if rng.IntN(2) == 0 {
			value = append([]byte(nil), value...)
			value[rng.IntN(len(value))] = byte(rng.Uint32())
		}
		format := []string{FormatSGLangMsgpack, FormatVLLMMsgpack, FormatProto, "x"}[rng.IntN(4)]
		if format == FormatProto {
			value = pv
		}
		msg := &kafka.Message{Key: []byte("engine-" + strconv.Itoa(rng.IntN(3))), Value: value, Headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(format)}, {Key: HeaderEpoch, Value: []byte("1")},
			{Key: HeaderSeq, Value: []byte(strconv.Itoa(i))}, {Key: HeaderModel, Value: []byte("m" + strconv.Itoa(rng.IntN(2)))},
			{Key: HeaderLoRA, Value: []byte([]string{"", "a"}[rng.IntN(2)])}}}
		got, gerr := d.DecodeRecord(msg, FormatProto)
		want, werr := DecodeRecord(msg, FormatProto)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
			t.Fatalf("record %d: Decoder differs from DecodeRecord:\n%s\nerror: %v, want %v", i, cmp.Diff(want, got), gerr, werr)
		}
	}
}

// TestDecoderAllocations: a simulated engine's record of a long prompt (32
// blocks evicted, 32 stored), SGLang or vLLM, costs the Decoder no
// allocation once its buffers have grown.
func TestDecoderAllocations(t *testing.T) {
	toks := make([]uint32, 32*16)
	hashes := make([]uint64, 32)
	for i := range toks {
		toks[i] = uint32(i * 293 % 151_000)
	}
	for i := range hashes {
		hashes[i] = uint64(i) * 0x9e3779b97f4a7c15
	}
	for _, f := range []struct{ wire, header string }{{"sglang", FormatSGLangMsgpack}, {"vllm", FormatVLLMMsgpack}} {
		v, err := engineenc.Batch(f.wire, tsFloat, 0, []engineenc.Event{
			{Kind: engineenc.BlockRemoved, BlockHashes: hashes},
			{Kind: engineenc.BlockStored, BlockHashes: hashes, TokenIDs: toks, BlockSize: 16, ParentHash: 7, HasParent: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg := &kafka.Message{Key: []byte("e"), Value: v, Headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(f.header)}, {Key: HeaderModel, Value: []byte("m")},
			{Key: HeaderDPRank, Value: []byte("0")}, {Key: HeaderEpoch, Value: []byte("1")}, {Key: HeaderSeq, Value: []byte("12345")}}}
		var d Decoder
		if n := testing.AllocsPerRun(100, func() {
			if rec, err := d.DecodeRecord(msg, FormatProto); err != nil || len(rec.Batch.Events) != 2 {
				t.Fatalf("decode: %v, %d events", err, len(rec.Batch.Events))
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per record, want 0", f.wire, n)
		}
	}
}

func TestParseDecimalIsParseUint(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	inputs := []string{"", "0", "007", "1", "18446744073709551615", "18446744073709551616", "99999999999999999999",
		"+1", "-1", "1_000", " 1", "1 ", "1a", "0x10", "١"}
	for range 5000 {
		b := make([]byte, rng.IntN(23))
		for i := range b {
			if rng.IntN(20) == 0 {
				b[i] = byte(rng.Uint32())
			} else {
				b[i] = '0' + byte(rng.IntN(10))
			}
		}
		inputs = append(inputs, string(b))
	}
	for _, s := range inputs {
		want, werr := strconv.ParseUint(s, 10, 64)
		got, ok := parseDecimal([]byte(s))
		if ok != (werr == nil) || (ok && got != want) {
			t.Fatalf("parseDecimal(%q) = %d, %v; ParseUint: %d, %v", s, got, ok, want, werr)
		}
	}
}

func TestLowerASCIIIsToLower(t *testing.T) {
	long := strings.Repeat("AbC", 30)
	for _, s := range []string{"", "full_attention", "Sliding_Window", "MAMBA", "İstate", "ÀB", "a\x80Z", long, "ChunkedLocal"} {
		var buf [64]byte
		if got, want := lowerASCII(buf[:0], []byte(s)), bytes.ToLower([]byte(s)); !bytes.Equal(got, want) {
			t.Errorf("lowerASCII(%q) = %q, want %q", s, got, want)
		}
	}
}

// FuzzDecoderMatchesDecodeRecord decodes each input between two engine
// records with one Decoder: all three must decode as DecodeRecord does, so
// that neither what the buffers held before nor what the input left in them
// shows.
func FuzzDecoderMatchesDecodeRecord(f *testing.F) {
	seeds := onePassSeeds(f)
	for _, s := range seeds {
		f.Add(s)
	}
	// The simulated engines' batches, after the fixtures in onePassSeeds.
	sglang, vllm := seeds[len(fuzzSeeds(f))], seeds[len(fuzzSeeds(f))+1]
	var d Decoder
	record := func(v []byte) *kafka.Message {
		return &kafka.Message{Key: []byte("e"), Value: v, Headers: []kafka.Header{
			{Key: HeaderFormat, Value: []byte(FormatSGLangMsgpack)}, {Key: HeaderEpoch, Value: []byte("1")},
			{Key: HeaderSeq, Value: []byte("2")}, {Key: HeaderModel, Value: []byte("m")}}}
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		for i, v := range [][]byte{sglang, payload, vllm} {
			msg := record(v)
			got, gerr := d.DecodeRecord(msg, FormatProto)
			want, werr := DecodeRecord(msg, FormatProto)
			if i != 1 && (gerr != nil || len(got.Batch.Events) != 5) {
				t.Fatalf("engine batch %d: %v, %d events; want 5", i, gerr, len(got.Batch.Events))
			}
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(gerr, werr) {
				t.Fatalf("record %d: Decoder differs from DecodeRecord:\n%s\nerror: %v, want %v", i, cmp.Diff(want, got), gerr, werr)
			}
		}
	})
}

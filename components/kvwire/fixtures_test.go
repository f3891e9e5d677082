package kvwire

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluicehq/sluice/components/kvwire/kvwiretest"

	"github.com/vmihailenco/msgpack/v5"
)

var update = flag.Bool("update", false, "rewrite the golden .msgpack fixtures in testdata/")

// omap is a msgpack map that keeps its key order, as msgspec (vLLM) and
// SGLang write struct-backed maps ("type" first).
type omap []kv

type kv struct {
	k string
	v any
}

func (m omap) EncodeMsgpack(e *msgpack.Encoder) error {
	if err := e.EncodeMapLen(len(m)); err != nil {
		return err
	}
	for _, f := range m {
		if err := e.EncodeString(f.k); err != nil {
			return err
		}
		if err := e.Encode(f.v); err != nil {
			return err
		}
	}
	return nil
}

// encode builds a payload with the msgpack library. uint64 values are
// written as msgpack uint64 and int64 values as int64 (the library's
// defaults), which is what the engines do for hashes.
func encode(t testing.TB, v any) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode fixture: %v", err)
	}
	return buf.Bytes()
}

// golden returns the fixture named name, rewriting it from built when
// -update is set, and fails if the committed file differs from built.
func golden(t *testing.T, name string, built []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name+".msgpack")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, built, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run go test -update to create it): %v", err)
	}
	if !bytes.Equal(got, built) {
		t.Errorf("%s differs from the fixture the test builds; run go test -update after checking why", path)
	}
	return got
}

func seq(from, n uint32) []uint32 {
	s := make([]uint32, n)
	for i := range s {
		s[i] = from + uint32(i)
	}
	return s
}

func bin32(last8 uint64) []byte {
	b := make([]byte, 32)
	for i := range 24 {
		b[i] = 0xAB
	}
	for i := range 8 {
		b[31-i] = byte(last8 >> (8 * i))
	}
	return b
}

func readFixture(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join("testdata", name+".msgpack"))
}

// mpBatch encodes a msgpack batch [ts, events, rank] of map events as Python writes them.
func mpBatch(t testing.TB, events ...map[string]any) []byte {
	t.Helper()
	b, err := kvwiretest.MsgpackBatch(tsFloat, events...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// vllmStored is a vLLM 0.33 map-form BlockStored of blocks of 16 tokens.
func vllmStored(hashes []uint64, parent any, tokens []uint32, group int) map[string]any {
	return map[string]any{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
		"block_size": 16, "lora_id": nil, "medium": "GPU", "lora_name": nil, "extra_keys": nil, "group_idx": group,
		"kv_cache_spec_kind": nil, "kv_cache_spec_sliding_window": nil, "locality": "LOCAL", "ownership": nil,
		"session_id": nil, "lookahead_token_ids": nil}
}

var (
	pbStored  = kvwiretest.Stored
	pbRemoved = kvwiretest.Removed
	pbCleared = kvwiretest.Cleared
)

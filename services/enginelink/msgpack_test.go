package enginelink

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

func mustMsgpack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

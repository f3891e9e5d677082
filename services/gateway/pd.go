package gateway

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/url"
	"strconv"
	"strings"
)

// bootstrap is the KV-transfer rendezvous of one PD request (SGLang's bootstrap_host,
// bootstrap_port and bootstrap_room).
type bootstrap struct {
	host string
	port uint32
	// rooms has one room per prompt: one for a single request, batch for a batched /generate.
	rooms []uint64
}

// newBootstrap builds the bootstrap record for a prefill engine at prefillURL. host is the
// URL's host, IPv6 in brackets; each room is random in [0, 2^63).
func newBootstrap(prefillURL string, port uint32, batch int) (bootstrap, error) {
	u, err := url.Parse(prefillURL)
	if err != nil {
		return bootstrap{}, err
	}
	host := u.Hostname()
	if host == "" {
		return bootstrap{}, errors.New("prefill URL has no host")
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	rooms := make([]uint64, max(batch, 1))
	for i := range rooms {
		rooms[i] = rand.Uint64() >> 1
	}
	return bootstrap{host: host, port: port, rooms: rooms}, nil
}

// inject returns a copy of the JSON object body with the bootstrap fields appended: scalars for
// a single request, lists of batch entries for a batched /generate. Appending keeps the
// client's bytes untouched; a client-sent bootstrap field is overridden because JSON decoders
// keep the last duplicate key. A body that is not an object is an error.
func (b bootstrap) inject(body []byte, batch int) ([]byte, error) {
	trimmed := bytes.TrimRight(body, " \t\r\n")
	if len(trimmed) < 2 || trimmed[len(trimmed)-1] != '}' || bytes.TrimLeft(trimmed, " \t\r\n")[0] != '{' {
		return nil, errors.New("request body is not a JSON object")
	}
	inner := bytes.TrimSpace(trimmed[bytes.IndexByte(trimmed, '{')+1 : len(trimmed)-1])
	out := make([]byte, 0, len(trimmed)+96+24*len(b.rooms))
	out = append(out, trimmed[:len(trimmed)-1]...)
	if len(inner) > 0 {
		out = append(out, ',')
	}
	hostJSON := strconv.Quote(b.host)
	port := "null"
	if b.port != 0 {
		port = strconv.FormatUint(uint64(b.port), 10)
	}
	field := func(name string, each func(i int) string) {
		out = append(out, '"')
		out = append(out, name...)
		out = append(out, '"', ':')
		if batch == 0 {
			out = append(out, each(0)...)
			return
		}
		out = append(out, '[')
		for i := range batch {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(out, each(i)...)
		}
		out = append(out, ']')
	}
	field("bootstrap_host", func(int) string { return hostJSON })
	out = append(out, ',')
	field("bootstrap_port", func(int) string { return port })
	out = append(out, ',')
	field("bootstrap_room", func(i int) string { return strconv.FormatUint(b.rooms[i], 10) })
	out = append(out, '}')
	return out, nil
}

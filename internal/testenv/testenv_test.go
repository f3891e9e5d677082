package testenv_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testenv"
)

const ioTimeout = 10 * time.Second

// TestKafkaAnswersApiVersions checks that every broker speaks the Kafka
// protocol, not merely that its port is open.
func TestKafkaAnswersApiVersions(t *testing.T) {
	for _, broker := range testenv.KafkaBrokers(t) {
		t.Run(broker, func(t *testing.T) {
			keys, err := kafkaAPIVersions(broker)
			if err != nil {
				t.Fatalf("ApiVersions(%s): %v", broker, err)
			}
			for _, k := range []int16{0, 1, 3, 18} { // Produce, Fetch, Metadata, ApiVersions
				if _, ok := keys[k]; !ok {
					t.Errorf("ApiVersions(%s): api key %d missing from %d advertised", broker, k, len(keys))
				}
			}
		})
	}
}

// TestPostgresAcceptsStartup checks that the database completes a protocol
// start-up (or asks for a password), not merely that its port is open.
func TestPostgresAcceptsStartup(t *testing.T) {
	if err := postgresStartup(testenv.PostgresDSN(t)); err != nil {
		t.Fatalf("postgres start-up: %v", err)
	}
}

// TestOutageKafkaRestart exercises StopKafka/StartKafka: the broker is gone
// after the stop and answers again after the start.
func TestOutageKafkaRestart(t *testing.T) {
	broker := testenv.KafkaBrokers(t)[0]
	testenv.StopKafka(t)
	if _, err := kafkaAPIVersions(broker); err == nil {
		t.Fatalf("ApiVersions(%s) succeeded after StopKafka", broker)
	}
	testenv.StartKafka(t)
	if _, err := kafkaAPIVersions(broker); err != nil {
		t.Fatalf("ApiVersions(%s) after StartKafka: %v", broker, err)
	}
}

// TestOutagePostgresRestart exercises StopPostgres/StartPostgres.
func TestOutagePostgresRestart(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	testenv.StopPostgres(t)
	if err := postgresStartup(dsn); err == nil {
		t.Fatal("postgres start-up succeeded after StopPostgres")
	}
	testenv.StartPostgres(t)
	if err := postgresStartup(dsn); err != nil {
		t.Fatalf("postgres start-up after StartPostgres: %v", err)
	}
}

// kafkaAPIVersions sends an ApiVersions v0 request (api key 18) and returns the
// advertised api keys with their max versions.
func kafkaAPIVersions(broker string) (map[int16]int16, error) {
	conn, err := net.DialTimeout("tcp", broker, ioTimeout)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return nil, err
	}

	const correlationID = 0x51c3
	clientID := "sluice-testenv"
	var req bytes.Buffer
	// Request header v1: api_key, api_version, correlation_id, client_id; empty v0 body.
	for _, v := range []any{int16(18), int16(0), int32(correlationID), int16(len(clientID))} {
		_ = binary.Write(&req, binary.BigEndian, v)
	}
	req.WriteString(clientID)
	frame := binary.BigEndian.AppendUint32(nil, uint32(req.Len()))
	if _, err := conn.Write(append(frame, req.Bytes()...)); err != nil {
		return nil, fmt.Errorf("write request: %w", err)
	}

	var size int32
	if err := binary.Read(conn, binary.BigEndian, &size); err != nil {
		return nil, fmt.Errorf("read response size: %w", err)
	}
	if size < 10 || size > 1<<20 {
		return nil, fmt.Errorf("implausible response size %d", size)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(conn, body); err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	r := bytes.NewReader(body)
	var (
		gotID   int32
		errCode int16
		n       int32
	)
	for _, p := range []any{&gotID, &errCode, &n} {
		if err := binary.Read(r, binary.BigEndian, p); err != nil {
			return nil, fmt.Errorf("decode response header: %w", err)
		}
	}
	if gotID != correlationID {
		return nil, fmt.Errorf("correlation id %#x, want %#x", gotID, correlationID)
	}
	if errCode != 0 {
		return nil, fmt.Errorf("error code %d", errCode)
	}
	if n < 0 || int(n)*6 > r.Len() {
		return nil, fmt.Errorf("api key count %d does not fit %d bytes", n, r.Len())
	}
	keys := make(map[int16]int16, n)
	for range n {
		var k [3]int16 // api_key, min_version, max_version
		if err := binary.Read(r, binary.BigEndian, &k); err != nil {
			return nil, fmt.Errorf("decode api key: %w", err)
		}
		keys[k[0]] = k[2]
	}
	return keys, nil
}

// postgresStartup sends a protocol 3.0 StartupMessage for the DSN's user and
// database and reads until ReadyForQuery, an authentication request other than
// AuthenticationOk (the server is up and wants a password), or an error.
func postgresStartup(dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return fmt.Errorf("DATABASE_URL %q is not a postgres:// URL", dsn)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	user := u.User.Username()
	db := strings.TrimPrefix(u.Path, "/")
	if db == "" {
		db = user
	}

	conn, err := net.DialTimeout("tcp", host, ioTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(ioTimeout)); err != nil {
		return err
	}

	var params bytes.Buffer
	_ = binary.Write(&params, binary.BigEndian, int32(196608)) // protocol 3.0
	for _, s := range []string{"user", user, "database", db, ""} {
		params.WriteString(s)
		params.WriteByte(0)
	}
	msg := binary.BigEndian.AppendUint32(nil, uint32(params.Len()+4))
	if _, err := conn.Write(append(msg, params.Bytes()...)); err != nil {
		return fmt.Errorf("write startup: %w", err)
	}

	br := bufio.NewReader(conn)
	for {
		typ, err := br.ReadByte()
		if err != nil {
			return fmt.Errorf("read message: %w", err)
		}
		var n int32
		if err := binary.Read(br, binary.BigEndian, &n); err != nil {
			return fmt.Errorf("read length: %w", err)
		}
		if n < 4 || n > 1<<20 {
			return fmt.Errorf("message %q: implausible length %d", typ, n)
		}
		payload := make([]byte, n-4)
		if _, err := io.ReadFull(br, payload); err != nil {
			return fmt.Errorf("read %q payload: %w", typ, err)
		}
		switch typ {
		case 'R':
			if len(payload) < 4 {
				return errors.New("short authentication message")
			}
			if binary.BigEndian.Uint32(payload) != 0 {
				return nil // up, and asking for credentials
			}
		case 'Z':
			_, _ = conn.Write([]byte{'X', 0, 0, 0, 4}) // Terminate
			return nil
		case 'E':
			return fmt.Errorf("server error: %s", strings.Join(strings.FieldsFunc(string(payload), func(r rune) bool { return r == 0 }), " | "))
		}
	}
}

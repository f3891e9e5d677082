package ingest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"
	"os"
)

// Snapshot file layout (version 1), all integers big-endian:
//
//	magic "SLUICESNAP" | u32 version
//	section*           | u8 name length, name, chunk* (u32 n, n bytes), u32 0
//	u8 0               | end of sections
//	u32 CRC-32C        | of every byte before it
//
// Sections: "load" (loadtable snapshot), "kvindex" (KV index snapshot), then
// "meta" (JSON snapshotMeta: the offsets the tables cover and the KV epoch
// and seq state). Chunking lets large sections stream without knowing their
// length in advance.
const (
	snapshotMagic   = "SLUICESNAP"
	snapshotVersion = 1
	maxChunk        = 1 << 20
)

// errCorruptSnapshot marks a snapshot file that fails its checksum, has an
// unknown version or does not parse; it is skipped, never trusted.
var errCorruptSnapshot = errors.New("corrupt ingest snapshot")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// snapWriter writes the snapshot layout, checksumming every byte.
type snapWriter struct {
	bw  *bufio.Writer
	crc hash.Hash32
	w   io.Writer // bw and crc
	err error
}

func newSnapWriter(f io.Writer) *snapWriter {
	sw := &snapWriter{bw: bufio.NewWriterSize(f, 1<<20), crc: crc32.New(crcTable)}
	sw.w = io.MultiWriter(sw.bw, sw.crc)
	sw.write([]byte(snapshotMagic))
	sw.write(binary.BigEndian.AppendUint32(nil, snapshotVersion))
	return sw
}

func (sw *snapWriter) write(b []byte) {
	if sw.err == nil {
		_, sw.err = sw.w.Write(b)
	}
}

// section writes one named section whose body fn produces.
func (sw *snapWriter) section(name string, fn func(io.Writer) error) error {
	sw.write([]byte{byte(len(name))})
	sw.write([]byte(name))
	cw := &chunkWriter{sw: sw, buf: make([]byte, 0, 64<<10)}
	if err := fn(cw); err != nil {
		return err
	}
	cw.flush()
	sw.write([]byte{0, 0, 0, 0})
	return sw.err
}

func (sw *snapWriter) finish() error {
	sw.write([]byte{0})
	if sw.err != nil {
		return sw.err
	}
	if _, err := sw.bw.Write(binary.BigEndian.AppendUint32(nil, sw.crc.Sum32())); err != nil {
		return err
	}
	return sw.bw.Flush()
}

// chunkWriter frames a section body into length-prefixed chunks.
type chunkWriter struct {
	sw  *snapWriter
	buf []byte
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(cap(c.buf)-len(c.buf), len(p))
		c.buf = append(c.buf, p[:k]...)
		p = p[k:]
		if len(c.buf) == cap(c.buf) {
			c.flush()
		}
	}
	return n, c.sw.err
}

func (c *chunkWriter) flush() {
	if len(c.buf) == 0 {
		return
	}
	c.sw.write(binary.BigEndian.AppendUint32(nil, uint32(len(c.buf))))
	c.sw.write(c.buf)
	c.buf = c.buf[:0]
}

// verifyChecksum reads f to the end and compares the trailing CRC-32C.
func verifyChecksum(f *os.File) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size < int64(len(snapshotMagic))+4+1+4 {
		return fmt.Errorf("%w: %d bytes is too short", errCorruptSnapshot, size)
	}
	crc := crc32.New(crcTable)
	if _, err := io.Copy(crc, io.NewSectionReader(f, 0, size-4)); err != nil {
		return err
	}
	var tail [4]byte
	if _, err := f.ReadAt(tail[:], size-4); err != nil {
		return err
	}
	if got, want := crc.Sum32(), binary.BigEndian.Uint32(tail[:]); got != want {
		return fmt.Errorf("%w: checksum %08x, file says %08x", errCorruptSnapshot, got, want)
	}
	return nil
}

func readHeader(r *bufio.Reader) error {
	var hdr [len(snapshotMagic) + 4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("%w: header: %w", errCorruptSnapshot, err)
	}
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return fmt.Errorf("%w: not a sluice ingest snapshot", errCorruptSnapshot)
	}
	if v := binary.BigEndian.Uint32(hdr[len(snapshotMagic):]); v != snapshotVersion {
		return fmt.Errorf("%w: version %d, this build reads %d", errCorruptSnapshot, v, snapshotVersion)
	}
	return nil
}

// nextSection returns the next section's name and body, or "" at the end.
func nextSection(r *bufio.Reader) (string, io.Reader, error) {
	n, err := r.ReadByte()
	if err != nil {
		return "", nil, fmt.Errorf("%w: %w", errCorruptSnapshot, err)
	}
	if n == 0 {
		return "", nil, nil
	}
	name := make([]byte, n)
	if _, err := io.ReadFull(r, name); err != nil {
		return "", nil, fmt.Errorf("%w: %w", errCorruptSnapshot, err)
	}
	return string(name), &chunkReader{r: r}, nil
}

// chunkReader reads a chunked section body up to its terminating chunk.
type chunkReader struct {
	r    *bufio.Reader
	left int
	done bool
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		var l [4]byte
		if _, err := io.ReadFull(c.r, l[:]); err != nil {
			return 0, fmt.Errorf("%w: %w", errCorruptSnapshot, io.ErrUnexpectedEOF)
		}
		n := binary.BigEndian.Uint32(l[:])
		if n > maxChunk {
			return 0, fmt.Errorf("%w: chunk of %d bytes", errCorruptSnapshot, n)
		}
		c.left = int(n)
		c.done = n == 0
	}
	n, err := c.r.Read(p[:min(len(p), c.left)])
	c.left -= n
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

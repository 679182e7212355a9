package serve

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"sync"
)

// maxDrain is how much of a request body the handler left unread is read
// and dropped to keep the connection (net/http's maxPostHandlerReadBytes);
// a larger rest closes the connection instead.
const maxDrain = 256 << 10

// maxTrailer bounds a chunked body's trailer section.
const maxTrailer = 8 << 10

var (
	errBadChunk   = errors.New("malformed chunked encoding")
	errBigTrailer = errors.New("chunked trailer too large")
)

// body is a request body read from the connection's buffered reader: a
// Content-Length or chunked, never past its end, so the next request on
// the connection starts where it ends.
type body struct {
	c         *conn
	mu        sync.Mutex // a transport may read in one goroutine and close in another
	remaining int64      // of the Content-Length, or of the current chunk
	chunked   bool
	inChunk   bool // between a chunk's size line and its data's CRLF
	done      bool // read to its end: the connection may serve another request
	err       error
	closed    bool
	expect    bool // a 100 Continue is owed before the first read
}

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	return b.read(p)
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}

func (b *body) read(p []byte) (int, error) {
	switch {
	case b.err != nil:
		return 0, b.err
	case b.done:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if b.expect {
		b.expect = false
		if err := b.c.writeContinue(); err != nil {
			b.err = err
			return 0, err
		}
	}
	if b.chunked {
		return b.readChunked(p)
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := b.c.br.Read(p)
	b.remaining -= int64(n)
	switch {
	case b.remaining == 0:
		b.finish()
	case err == io.EOF:
		b.err = io.ErrUnexpectedEOF
		return n, b.err
	case err != nil:
		b.err = err
	}
	return n, b.err
}

func (b *body) readChunked(p []byte) (int, error) {
	br := b.c.br
	if !b.inChunk {
		size, err := chunkSize(br)
		if err != nil {
			b.err = err
			return 0, err
		}
		if size == 0 {
			if err := skipTrailer(br); err != nil {
				b.err = err
				return 0, err
			}
			b.finish()
			return 0, io.EOF
		}
		b.remaining, b.inChunk = size, true
	}
	if int64(len(p)) > b.remaining {
		p = p[:b.remaining]
	}
	n, err := br.Read(p)
	b.remaining -= int64(n)
	if b.remaining == 0 {
		b.inChunk = false
		if err == nil {
			err = expectCRLF(br)
		}
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	b.err = err
	return n, err
}

// finish marks the body read to its end.
func (b *body) finish() {
	b.done = true
	b.c.bodyDone()
}

// drain reads and drops what the handler left of the body, up to maxDrain;
// it reports whether the connection can serve another request.
func (b *body) drain() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return true
	}
	if b.expect || b.err != nil || !b.chunked && b.remaining > maxDrain {
		return false // the client may not even have sent it (no 100 Continue)
	}
	var scratch [4 << 10]byte
	for left := maxDrain; left > 0 && !b.done; {
		n, err := b.read(scratch[:min(len(scratch), left)])
		left -= n
		if err != nil && err != io.EOF {
			return false
		}
	}
	return b.done
}

// chunkSize reads a chunk's size line: hex digits, optional extensions
// (ignored), CRLF.
func chunkSize(br *bufio.Reader) (int64, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == bufio.ErrBufferFull {
			err = errBadChunk
		}
		return 0, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return 0, errBadChunk
	}
	line = line[:len(line)-2]
	var n int64
	i := 0
	for ; i < len(line); i++ {
		c := line[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			goto ext
		}
		if i >= 15 { // 16 hex digits could overflow int64
			return 0, errBadChunk
		}
		n = n<<4 | int64(d)
	}
ext:
	if i == 0 {
		return 0, errBadChunk
	}
	if rest := line[i:]; len(rest) > 0 {
		// chunk-ext: BWS ";" ...; nothing else may follow the size.
		j := 0
		for j < len(rest) && (rest[j] == ' ' || rest[j] == '\t') {
			j++
		}
		if j == len(rest) || rest[j] != ';' || !validValue(string(rest[j:])) {
			return 0, errBadChunk
		}
	}
	return n, nil
}

// expectCRLF reads the CRLF that ends a chunk's data.
func expectCRLF(br *bufio.Reader) error {
	b, err := br.Peek(2)
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if b[0] != '\r' || b[1] != '\n' {
		return errBadChunk
	}
	_, _ = br.Discard(2)
	return nil
}

// skipTrailer reads and drops the trailer section after the last chunk.
func skipTrailer(br *bufio.Reader) error {
	total := 0
	for {
		line, err := br.ReadSlice('\n')
		total += len(line)
		switch {
		case err == io.EOF:
			return io.ErrUnexpectedEOF
		case err == bufio.ErrBufferFull || total > maxTrailer:
			return errBigTrailer
		case err != nil:
			return err
		case len(line) < 2 || line[len(line)-2] != '\r':
			return errBadChunk
		case len(line) == 2:
			return nil
		}
	}
}

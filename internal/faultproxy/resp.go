package faultproxy

import (
	"bytes"
	"errors"
)

// maxLine bounds a RESP header or simple-type line. A longer line means the
// stream is not RESP (or is corrupt) and is reported as errProtocol.
const maxLine = 1 << 20

// maxLen bounds the length field of a bulk or aggregate header.
const maxLen = 1<<31 - 1

// errProtocol reports bytes that are not a RESP2/RESP3 reply stream.
var errProtocol = errors.New("faultproxy: invalid RESP reply stream")

// replySplitter cuts a server-to-client RESP2/RESP3 byte stream into complete
// top-level replies.
//
// It parses incrementally: feed appends the new bytes and resumes where the
// previous call stopped (inside a header line, a bulk body or an aggregate),
// so no byte is parsed twice. The bytes of an incomplete reply stay
// buffered until the reply completes.
//
// The nesting of aggregates is tracked with one counter: pending is the number
// of elements still needed to finish the current reply. A reply starts with
// one slot; a scalar fills a slot; an aggregate of n elements fills its slot
// and opens n (2n for maps); an attribute opens 2n and leaves its slot to the
// reply that follows it. The reply is complete when pending drops to zero.
//
// A push (>) is a top-level unit of its own and is returned as a reply.
// Streamed types (such as $? and *?) are not supported: Redis does not send
// them, and they are reported as errProtocol.
type replySplitter struct {
	buf     []byte // bytes from the start of the current reply on
	start   int    // start of the current reply in buf
	off     int    // parse position: everything before it is parsed
	scan    int    // where the search for the end of the current line resumes
	pending int    // elements still needed by the current reply (0: between replies)
	inBulk  bool   // parsing the body of a bulk string
	bulkEnd int    // end of that body in buf, including its CRLF
}

// feed appends data and returns the replies it completed, in order. The
// returned slices alias internal storage and are valid only until the next
// call. On errProtocol the replies completed before the bad bytes are still
// returned, and rest gives the unparsed remainder; the splitter must not be
// fed again.
func (s *replySplitter) feed(data []byte) ([][]byte, error) {
	s.compact()
	s.buf = append(s.buf, data...)
	var replies [][]byte
	for {
		if s.inBulk {
			if len(s.buf) < s.bulkEnd {
				return replies, nil
			}
			if s.buf[s.bulkEnd-2] != '\r' || s.buf[s.bulkEnd-1] != '\n' {
				return replies, errProtocol
			}
			s.off, s.scan, s.inBulk = s.bulkEnd, s.bulkEnd, false
			s.pending--
		} else {
			line, ok, err := s.line()
			if err != nil {
				return replies, err
			}
			if !ok {
				return replies, nil
			}
			if s.pending == 0 {
				s.pending = 1 // the first line of a new reply
			}
			if err := s.header(line); err != nil {
				return replies, err
			}
		}
		if s.pending == 0 && !s.inBulk {
			replies = append(replies, s.buf[s.start:s.off])
			s.start = s.off
		}
	}
}

// rest returns the buffered bytes that do not belong to a returned reply.
func (s *replySplitter) rest() []byte { return s.buf[s.start:] }

// compact moves the incomplete reply to the front of buf. Each byte is moved
// at most once: after compaction start is 0 until the reply completes.
func (s *replySplitter) compact() {
	if s.start == 0 {
		return
	}
	n := copy(s.buf, s.buf[s.start:])
	s.buf = s.buf[:n]
	s.off -= s.start
	s.scan -= s.start
	if s.inBulk {
		s.bulkEnd -= s.start
	}
	s.start = 0
}

// line returns the next CRLF-terminated line (without CRLF) from off, or
// ok false when it has not fully arrived yet.
func (s *replySplitter) line() (line []byte, ok bool, err error) {
	i := bytes.IndexByte(s.buf[s.scan:], '\n')
	if i < 0 {
		s.scan = len(s.buf)
		if s.scan-s.off > maxLine {
			return nil, false, errProtocol
		}
		return nil, false, nil
	}
	nl := s.scan + i
	if nl == s.off || s.buf[nl-1] != '\r' {
		return nil, false, errProtocol
	}
	line = s.buf[s.off : nl-1]
	s.off, s.scan = nl+1, nl+1
	return line, true, nil
}

// header applies one header or simple-type line to the parse state.
func (s *replySplitter) header(line []byte) error {
	if len(line) == 0 {
		return errProtocol
	}
	typ, arg := line[0], line[1:]
	switch typ {
	case '+', '-', ':', '_', '#', ',', '(': // simple, error, integer, null, boolean, double, big number
		s.pending--
	case '$', '!', '=': // bulk string, bulk error, verbatim string
		n, err := parseLen(arg, typ == '$')
		if err != nil {
			return err
		}
		if n < 0 { // $-1: null bulk string
			s.pending--
			return nil
		}
		s.inBulk, s.bulkEnd = true, s.off+n+2
	case '*', '~', '>', '%', '|': // array, set, push, map, attribute
		n, err := parseLen(arg, typ == '*')
		if err != nil {
			return err
		}
		switch {
		case n < 0: // *-1: null array
			s.pending--
		case typ == '%':
			s.pending += 2*n - 1
		case typ == '|':
			s.pending += 2 * n // the reply that follows fills the slot
		default:
			s.pending += n - 1
		}
	default:
		return errProtocol
	}
	return nil
}

// parseLen parses the decimal length of a bulk or aggregate header. "-1" is
// accepted only when null is true.
func parseLen(b []byte, null bool) (int, error) {
	if null && string(b) == "-1" {
		return -1, nil
	}
	if len(b) == 0 || len(b) > 10 {
		return 0, errProtocol
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errProtocol
		}
		n = n*10 + int(c-'0')
	}
	if n > maxLen {
		return 0, errProtocol
	}
	return n, nil
}

package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Encode writes e to w as one JSON object followed by a newline, in a
// single Write call. Use a [Writer] to share w between goroutines.
func Encode(w io.Writer, e Event) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// Writer encodes events as JSON lines; it is safe for concurrent use.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	err error
}

// NewWriter returns a Writer that writes to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Add writes e. The first write error is kept (see Err); later events are
// dropped after an error.
func (w *Writer) Add(e Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = Encode(w.w, e)
	}
}

// Err returns the first write error, if any.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Decode reads JSON lines from r until EOF and calls f for each event.
// Lines that do not start with '{' (after leading blanks), that are not
// valid JSON (such as a line cut short when a child process is killed), or
// that have no kind are skipped, so other output mixed into the stream is
// tolerated. Only read errors are returned.
func Decode(r io.Reader, f func(Event)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil || e.Kind == "" {
			continue
		}
		f(e)
	}
	return sc.Err()
}

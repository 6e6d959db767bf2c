package supervisor

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// DefaultLogLimit bounds a replica's output.log when its sandbox sets none.
const DefaultLogLimit = 1 << 30

// maxTail is the most output kept past the limit, to be appended at the
// end: the last lines are the ones a user reads first.
const maxTail = 16 << 20

// output copies the child's stdout and stderr into output.log. The file
// only grows (the agent ships it by offset): up to limit bytes it gets
// everything; past that only the last bytes are kept, in memory, and
// appended when the output ends, after a note of how much was cut. A
// write that fails (a full disk) loses those bytes, never the replica: the
// child is never blocked on the log, and the loss is noted at the end.
type output struct {
	f       *os.File
	limit   int64
	written int64

	tail    []byte // ring of the last bytes past the limit
	tailPos int
	cut     int64 // bytes past the limit not in tail
	past    int64 // bytes past the limit, in all
	lost    int64 // bytes a failed write dropped
	lostErr error
}

func newOutput(f *os.File, limit int64) *output {
	if limit <= 0 {
		limit = DefaultLogLimit
	}
	fi, err := f.Stat()
	o := &output{f: f, limit: limit}
	if err == nil {
		o.written = fi.Size()
	}
	return o
}

// Write never fails: the child must not stall or die on its log.
func (o *output) Write(p []byte) (int, error) {
	n := len(p)
	if room := o.limit - o.written; room > 0 {
		head := p[:min(int64(len(p)), room)]
		o.append(head)
		p = p[len(head):]
	}
	if len(p) > 0 {
		o.keepTail(p)
	}
	return n, nil
}

func (o *output) append(p []byte) {
	w, err := o.f.Write(p)
	o.written += int64(w)
	if err != nil {
		o.lost += int64(len(p) - w)
		if o.lostErr == nil {
			o.lostErr = err
		}
	}
}

func (o *output) keepTail(p []byte) {
	o.past += int64(len(p))
	size := int(min(o.limit, maxTail))
	if o.tail == nil {
		o.tail = make([]byte, 0, size)
	}
	for len(p) > 0 {
		if len(o.tail) < size {
			k := min(len(p), size-len(o.tail))
			o.tail = append(o.tail, p[:k]...)
			p = p[k:]
			continue
		}
		k := copy(o.tail[o.tailPos:], p)
		o.cut += int64(k)
		o.tailPos = (o.tailPos + k) % size
		p = p[k:]
	}
}

// finish appends what the end of the output needs: the note of a cut and
// the kept tail, and the note of bytes a full disk lost.
func (o *output) finish() {
	if o.past > 0 {
		fmt.Fprintf(o.f, "\n[gpufleet: output passed its limit of %d bytes; %d bytes cut, the last %d follow]\n", o.limit, o.cut, len(o.tail))
		o.f.Write(o.tail[o.tailPos:])
		o.f.Write(o.tail[:o.tailPos])
	}
	if o.lost > 0 {
		fmt.Fprintf(o.f, "\n[gpufleet: %d bytes of output could not be written: %v]\n", o.lost, o.lostErr)
	}
}

// copier pumps the child's pipe into an output.
type copier struct {
	r    *os.File
	out  *output
	done chan struct{}
	once sync.Once
}

func startCopier(r *os.File, out *output) *copier {
	c := &copier{r: r, out: out, done: make(chan struct{})}
	go func() {
		io.Copy(out, r) // output.Write never fails; a read error is the end
		close(c.done)
	}()
	return c
}

// wait waits for the end of the output, at most bound: a process that left
// the child's group may hold the pipe open, and must not hold the replica.
func (c *copier) wait(bound time.Duration) {
	select {
	case <-c.done:
	case <-time.After(bound):
		c.r.Close() // unblocks the copy
		<-c.done
	}
	c.once.Do(func() {
		c.r.Close()
		c.out.finish()
	})
}

package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
)

// Bounds on every file slotd reads because the configuration names it:
// the file itself (MaxFileSize), TLS certificates, keys and CA bundles,
// and the token file. A running daemon reads them again on each reload, so
// a file that never ends (/dev/zero) or never answers (a FIFO no one
// writes, a hung mount) must cost an error, not the process's memory or a
// reload that never returns.
const (
	// MaxNamedFileSize is the largest TLS or token file read, in bytes
	// (1 MiB): a CA bundle of every public root is about 220 KB.
	MaxNamedFileSize = 1 << 20
	// FileReadTimeout bounds opening and reading one file.
	FileReadTimeout = 5 * time.Second
)

// Why a file is refused; each is wrapped in an *os.PathError naming the
// file, and the caller names the key.
var (
	errNotRegular = errors.New("not a regular file (a device, FIFO, socket or directory is refused: it may never end or never answer)")
	errChanged    = errors.New("changed while it was read (being written?): nothing read; try again once it is complete")
	errSlow       = fmt.Errorf("not read within %v (a hung file system?)", FileReadTimeout)
)

// afterRead, when set (by tests only), runs between reading a file and
// checking that it did not change meanwhile.
var afterRead func(path string)

// readFile is how slotd reads every file its configuration names, and the
// configuration itself: path must be a regular file (after symlinks, so a
// Kubernetes secret's link farm is fine) of at most limit bytes, read
// whole within FileReadTimeout, and unchanged while it was read (its size
// and modification time the same before and after, and the bytes read as
// many as its size). The open does not block on a FIFO (O_NONBLOCK), and
// the kind of file is checked on the open descriptor, so nothing can
// swap the path between the check and the read. A read past the
// timeout is abandoned: its goroutine ends, and closes the file, when
// the file system answers. It returns the file's mode too, for the token
// file's permission check.
func readFile(path string, limit int64) ([]byte, os.FileMode, error) {
	type result struct {
		data []byte
		mode os.FileMode
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, mode, err := readRegular(path, limit)
		done <- result{data, mode, err}
	}()
	timer := time.NewTimer(FileReadTimeout)
	defer timer.Stop()
	select {
	case r := <-done:
		return r.data, r.mode, r.err
	case <-timer.C:
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: errSlow}
	}
}

func readRegular(path string, limit int64) ([]byte, os.FileMode, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	before, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if !before.Mode().IsRegular() {
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: errNotRegular}
	}
	if before.Size() > limit {
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: tooLarge(limit)}
	}
	// Read into a buffer of the size the file says (and one byte more, to
	// see it grew), not io.ReadAll's doublings: a 16 MiB file under the
	// race detector on a loaded machine took over 5 s that way.
	data := make([]byte, 0, before.Size()+1)
	for int64(len(data)) <= limit {
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)] // the file grew: let it show
		}
		n, err := f.Read(data[len(data):min(int64(cap(data)), limit+1)])
		data = data[:len(data)+n]
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, err
		}
	}
	if int64(len(data)) > limit {
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: tooLarge(limit)}
	}
	if afterRead != nil {
		afterRead(path)
	}
	after, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	if after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) || int64(len(data)) != after.Size() {
		return nil, 0, &os.PathError{Op: "read", Path: path, Err: errChanged}
	}
	return data, after.Mode(), nil
}

// tooLarge says a file is past limit, naming the limit in MiB as the docs
// do.
func tooLarge(limit int64) error {
	if limit == MaxFileSize {
		return errTooLarge
	}
	return fmt.Errorf("larger than %d bytes (%d MiB), the limit for a file the configuration names", limit, limit>>20)
}

package sandbox

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/base64"
	"errors"
	"io"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// maxFileContent bounds what read and replace hold in memory; larger files
// are read by line range or downloaded.
const maxFileContent = 16 << 20

// maxUpload bounds one upload (streamed to disk, never held in memory).
const maxUpload = 4 << 30

type fileReadReq struct {
	File      *string     `json:"file"`
	StartLine *int        `json:"start_line"`
	EndLine   *int        `json:"end_line"`
	Sudo      unsupported `json:"sudo" accept:"false"`
}

type fileReadResult struct {
	Content string `json:"content"`
	File    string `json:"file"`
	// Encoding is "utf-8", or "base64" when the selected bytes are not valid
	// UTF-8 text (binary files): JSON cannot carry raw binary.
	Encoding string `json:"encoding"`
}

type fileWriteReq struct {
	File            *string     `json:"file"`
	Content         *string     `json:"content"`
	Encoding        string      `json:"encoding"`
	Append          bool        `json:"append"`
	LeadingNewline  unsupported `json:"leading_newline" accept:"false"`
	TrailingNewline unsupported `json:"trailing_newline" accept:"false"`
	Sudo            unsupported `json:"sudo" accept:"false"`
}

type fileReplaceReq struct {
	File   *string     `json:"file"`
	OldStr *string     `json:"old_str"`
	NewStr *string     `json:"new_str"`
	Sudo   unsupported `json:"sudo" accept:"false"`
}

// handleFileRead returns lines [start_line, end_line) (0-based, end
// exclusive, absent = to the end), line endings included. Binary content
// comes back base64-encoded with encoding "base64".
func (s *Server) handleFileRead(w http.ResponseWriter, r *http.Request) error {
	var req fileReadReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.File == nil {
		return missing("file")
	}
	start, end := 0, -1
	if req.StartLine != nil {
		if start = *req.StartLine; start < 0 {
			return invalid("start_line", "start_line must be >= 0")
		}
	}
	if req.EndLine != nil {
		if end = *req.EndLine; end < start {
			return invalid("end_line", "end_line must be >= start_line")
		}
	}
	host, virt, err := s.hostPath("file", *req.File, false)
	if err != nil {
		return err
	}
	if _, err := s.regularFile("file", host, virt); err != nil {
		return err
	}
	f, err := os.Open(host)
	if err != nil {
		return s.fsError(err, virt)
	}
	defer f.Close()
	content, err := readLines(f, start, end)
	if errors.Is(err, errTooLarge) {
		return statusErr(http.StatusRequestEntityTooLarge,
			"%s: the selected content exceeds %d bytes; read fewer lines (start_line/end_line) or use /v1/file/download", virt, maxFileContent)
	}
	if err != nil {
		return s.fsError(err, virt)
	}
	res := fileReadResult{File: virt, Content: string(content), Encoding: "utf-8"}
	if !utf8.Valid(content) || bytes.IndexByte(content, 0) >= 0 {
		res.Content, res.Encoding = base64.StdEncoding.EncodeToString(content), "base64"
	}
	ok(w, "file read", res)
	return nil
}

var errTooLarge = errors.New("content too large")

// regularFile stats an existing file and refuses directories and special
// files (opening a FIFO would block the request forever).
func (s *Server) regularFile(field, host, virt string) (os.FileInfo, error) {
	fi, err := os.Stat(host)
	switch {
	case err != nil:
		return nil, s.fsError(err, virt)
	case fi.IsDir():
		return nil, invalid(field, "is a directory: %s", virt)
	case !fi.Mode().IsRegular():
		return nil, invalid(field, "not a regular file: %s", virt)
	}
	return fi, nil
}

// readLines returns lines [start, end) of r (end < 0: to EOF).
func readLines(r io.Reader, start, end int) ([]byte, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var out []byte
	for line := 0; end < 0 || line < end; {
		chunk, err := br.ReadSlice('\n')
		if line >= start && len(chunk) > 0 {
			if len(out)+len(chunk) > maxFileContent {
				return nil, errTooLarge
			}
			out = append(out, chunk...)
		}
		switch {
		case err == nil:
			line++
		case errors.Is(err, bufio.ErrBufferFull):
			// a long line continues in the next slice
		case errors.Is(err, io.EOF):
			return out, nil
		default:
			return nil, err
		}
	}
	return out, nil
}

func (s *Server) handleFileWrite(w http.ResponseWriter, r *http.Request) error {
	var req fileWriteReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	if req.File == nil {
		return missing("file")
	}
	if req.Content == nil {
		return missing("content")
	}
	data := []byte(*req.Content)
	switch strings.ToLower(req.Encoding) {
	case "", "utf-8", "utf8", "text":
	case "base64":
		var err error
		if data, err = decodeBase64(*req.Content); err != nil {
			return invalid("content", "content is not valid base64")
		}
	default:
		return invalid("encoding", "encoding must be utf-8 or base64, got %q", req.Encoding)
	}
	host, virt, err := s.hostPath("file", *req.File, true)
	if err != nil {
		return err
	}
	if _, err := os.Stat(host); err == nil {
		if _, err := s.regularFile("file", host, virt); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return s.fsError(err, path.Dir(virt))
	}
	if req.Append {
		err = appendSafe(host, data)
	} else {
		_, err = writeAtomic(host, bytes.NewReader(data), nil)
	}
	if err != nil {
		return s.fsError(err, virt)
	}
	ok(w, "file written", map[string]any{"file": virt, "bytes_written": len(data)})
	return nil
}

func decodeBase64(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
}

// handleFileReplace replaces every occurrence of old_str. Zero occurrences
// is a 422 naming old_str (the file is left untouched), or a 409 conflict
// when another API edit changed the file while this one waited for it; a
// change by anything else between read and write is a 409 too (editFile).
func (s *Server) handleFileReplace(w http.ResponseWriter, r *http.Request) error {
	var req fileReplaceReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	switch {
	case req.File == nil:
		return missing("file")
	case req.OldStr == nil:
		return missing("old_str")
	case *req.OldStr == "":
		return invalid("old_str", "old_str must not be empty")
	case req.NewStr == nil:
		return missing("new_str")
	}
	oldStr, newStr := []byte(*req.OldStr), []byte(*req.NewStr)
	var n int
	virt, _, _, err := s.editFile("file", *req.File, func(data []byte) ([]byte, error) {
		if n = bytes.Count(data, oldStr); n == 0 {
			return nil, invalid("old_str", "old_str not found in %s", s.virtualPath(*req.File))
		}
		return bytes.ReplaceAll(data, oldStr, newStr), nil
	})
	if err != nil {
		return err
	}
	ok(w, "file updated", map[string]any{"file": virt, "replaced_count": n})
	return nil
}

// handleFileUpload streams a multipart upload (`file` part, optional `path`
// field) to disk, never holding it in memory. The file lands at path, or
// inside it when path is an existing directory or ends in "/", or in the
// home directory without a path. It is written under a temporary name and
// renamed, so a broken upload never leaves a partial file. When `path`
// comes before `file` (as HTML forms and HTTP clients send it) the bytes go
// straight to the destination directory; otherwise they are spooled first.
func (s *Server) handleFileUpload(w http.ResponseWriter, r *http.Request) error {
	r.Body = http.MaxBytesReader(w, r.Body, maxUpload)
	mr, err := r.MultipartReader()
	if err != nil {
		return statusErr(http.StatusBadRequest, "expected a multipart/form-data body with a `file` part")
	}
	var (
		target, name, tmp, dest, virt string
		size                          int64
	)
	defer func() {
		if tmp != "" {
			_ = os.Remove(tmp)
		}
	}()
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return uploadError(err)
		}
		switch part.FormName() {
		case "path":
			b, err := io.ReadAll(io.LimitReader(part, 4096))
			if err != nil {
				return uploadError(err)
			}
			target = string(b)
		case "file":
			if tmp != "" {
				return invalid("file", "only one `file` part is allowed")
			}
			name = path.Base(strings.ReplaceAll(part.FileName(), "\\", "/"))
			dir := s.ensureStateDir()
			if target != "" {
				if dest, virt, err = s.uploadDest(target, name); err != nil {
					return err
				}
				dir = filepath.Dir(dest)
			}
			f, err := createTemp(filepath.Join(dir, "upload"))
			if err != nil {
				return s.fsError(err, path.Dir(virt))
			}
			tmp = f.Name()
			size, err = io.Copy(diskWriter{f}, part)
			if err == nil {
				err = diskErr(f.Sync())
			}
			if cerr := f.Close(); err == nil {
				err = diskErr(cerr)
			}
			if de := (diskError{}); errors.As(err, &de) {
				return s.fsError(de.error, cmp.Or(virt, name))
			}
			if err != nil {
				return uploadError(err)
			}
		}
		_ = part.Close()
	}
	if tmp == "" {
		return missing("file")
	}
	if dest == "" {
		if dest, virt, err = s.uploadDest(target, name); err != nil {
			return err
		}
	}
	if err := moveFile(tmp, dest); err != nil {
		return s.fsError(err, virt)
	}
	tmp = ""
	ok(w, "file uploaded", map[string]any{"file_path": virt, "file_size": size, "success": true})
	return nil
}

// uploadDest resolves an upload's destination and creates its parent.
func (s *Server) uploadDest(target, name string) (host, virt string, err error) {
	validName := name != "" && name != "." && name != ".." && name != "/"
	switch {
	case target == "" || strings.HasSuffix(target, "/"):
		if !validName {
			return "", "", invalid("path", "path is required when the uploaded file has no file name")
		}
		virt = path.Join(s.virtualPath(target+"."), name)
	default:
		virt = s.virtualPath(target)
		if h, _, err := s.pm.Resolve(virt); err == nil && validName {
			if fi, err := os.Stat(h); err == nil && fi.IsDir() {
				virt = path.Join(virt, name)
			}
		}
	}
	if host, virt, err = s.hostPath("path", virt, true); err != nil {
		return "", "", err
	}
	if fi, err := os.Stat(host); err == nil && fi.IsDir() {
		return "", "", invalid("path", "is a directory: %s", virt)
	}
	if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
		return "", "", s.fsError(err, path.Dir(virt))
	}
	return host, virt, nil
}

func uploadError(err error) error {
	var maxErr *http.MaxBytesError
	if errors.As(err, &maxErr) {
		return statusErr(http.StatusRequestEntityTooLarge, "upload exceeds %d bytes", maxErr.Limit)
	}
	return statusErr(http.StatusBadRequest, "malformed multipart body")
}

// diskWriter tags write errors, so a full disk is told from a broken body.
type diskWriter struct{ f *os.File }

func (w diskWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	return n, diskErr(err)
}

type diskError struct{ error }

func (e diskError) Unwrap() error { return e.error }

func diskErr(err error) error {
	if err == nil {
		return nil
	}
	return diskError{err}
}

// moveFile renames src to dst, copying when they are on different
// filesystems (a spooled upload sits in the system temp dir).
func moveFile(src, dst string) error {
	if err := os.Chmod(src, 0o644); err != nil {
		return err
	}
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if _, err := writeAtomic(dst, in, nil); err != nil {
		return err
	}
	return os.Chmod(dst, 0o644)
}

// handleFileDownload streams a file (with Range support) as an attachment.
func (s *Server) handleFileDownload(w http.ResponseWriter, r *http.Request) error {
	host, virt, err := s.hostPath("path", r.URL.Query().Get("path"), false)
	if err != nil {
		return err
	}
	fi, err := s.regularFile("path", host, virt)
	if err != nil {
		return err
	}
	f, err := os.Open(host)
	if err != nil {
		return s.fsError(err, virt)
	}
	defer f.Close()
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(virt)}))
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", fi.ModTime(), f)
	return nil
}

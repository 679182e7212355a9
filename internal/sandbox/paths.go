package sandbox

import (
	"errors"
	"io/fs"
	"net/http"
	"path"
	"syscall"
)

// virtualPath cleans a request path; a relative one is taken relative to
// the home directory.
func (s *Server) virtualPath(p string) string {
	if !path.IsAbs(p) {
		p = path.Join(s.home, p)
	}
	return path.Clean(p)
}

// hostPath resolves the request path in field to a host path: 422 when
// empty, 403 when it escapes every mapping or (write) lands in a read-only
// one. It also returns the cleaned virtual path, for messages and results.
func (s *Server) hostPath(field, p string, write bool) (host, virt string, err error) {
	if p == "" {
		return "", "", missing(field)
	}
	virt = s.virtualPath(p)
	host, ro, err := s.pm.Resolve(virt)
	switch {
	case errors.Is(err, ErrPathOutside):
		return "", virt, statusErr(http.StatusForbidden, "access denied: %s is outside the sandbox's mapped directories", virt)
	case err != nil:
		return "", virt, s.fsError(err, virt)
	case write && ro:
		return "", virt, statusErr(http.StatusForbidden, "access denied: %s is read-only", virt)
	}
	return host, virt, nil
}

// fsError turns a filesystem error into a client error that names the
// virtual path (never the host one). Unknown errors are 500s, logged.
func (s *Server) fsError(err error, virt string) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return statusErr(http.StatusNotFound, "no such file or directory: %s", virt)
	case errors.Is(err, syscall.ENOTDIR):
		return statusErr(http.StatusNotFound, "not a directory in path: %s", virt)
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return statusErr(http.StatusForbidden, "permission denied: %s", virt)
	case errors.Is(err, syscall.EISDIR):
		return statusErr(http.StatusUnprocessableEntity, "is a directory: %s", virt)
	case errors.Is(err, syscall.ENAMETOOLONG):
		return statusErr(http.StatusUnprocessableEntity, "file name too long: %s", virt)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return statusErr(http.StatusInsufficientStorage, "no space left on device writing %s", virt)
	}
	return &apiError{status: http.StatusInternalServerError, err: err}
}

package sandbox

import (
	"errors"
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"
)

// POST /v1/file/glob, shaped as AIO's FileGlobResult.

// globReq is the AIO FileGlobRequest; the defaults are AIO's: files only,
// hidden entries skipped, at most 5000 results sorted by path.
type globReq struct {
	Path          *string  `json:"path"`
	Pattern       *string  `json:"pattern"`
	Exclude       []string `json:"exclude"`
	IncludeHidden bool     `json:"include_hidden"`
	FilesOnly     *bool    `json:"files_only"`
	MaxResults    *int     `json:"max_results"`
	SortBy        string   `json:"sort_by"`
	SortDesc      bool     `json:"sort_desc"`
	// size and modified_time are always sent
	IncludeMetadata unsupported `json:"include_metadata" accept:"true"`
}

// globFile is the AIO GlobFileInfo.
type globFile struct {
	Path         string `json:"path"`
	Name         string `json:"name"`
	IsDirectory  bool   `json:"is_directory"`
	Size         int64  `json:"size"`
	ModifiedTime string `json:"modified_time"`
}

type globResult struct {
	Path       string     `json:"path"`
	Pattern    string     `json:"pattern"`
	Files      []globFile `json:"files"`
	TotalCount int        `json:"total_count"`
	Truncated  bool       `json:"truncated"`
}

const defaultGlobMax = 5000

// handleFileGlob lists entries under path whose relative path matches
// pattern, minus those matching an exclude pattern (by relative path or by
// name).
func (s *Server) handleFileGlob(w http.ResponseWriter, r *http.Request) error {
	var req globReq
	if err := decode(w, r, &req); err != nil {
		return err
	}
	host, virt, _, err := s.searchRoot(req.Path, false)
	if err != nil {
		return err
	}
	if req.Pattern == nil {
		return missing("pattern")
	}
	pattern, err := checkGlob("pattern", *req.Pattern, virt)
	if err != nil {
		return err
	}
	excludes := make([]string, 0, len(req.Exclude))
	for _, e := range req.Exclude {
		x, err := checkGlob("exclude", e, virt)
		if err != nil {
			return err
		}
		excludes = append(excludes, x)
	}
	limit := defaultGlobMax
	if req.MaxResults != nil {
		if limit = *req.MaxResults; limit < 1 {
			return invalid("max_results", "max_results must be >= 1")
		}
		limit = min(limit, maxListed)
	}
	less, err := globOrder(req.SortBy, req.SortDesc)
	if err != nil {
		return err
	}
	filesOnly := req.FilesOnly == nil || *req.FilesOnly
	res := globResult{Path: virt, Pattern: *req.Pattern, Files: []globFile{}}
	err = walk(r.Context(), host, func(rel string, d fs.DirEntry) error {
		if !req.IncludeHidden && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		for _, x := range excludes {
			if matchGlob(x, rel) || matchGlob(x, d.Name()) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
		}
		if filesOnly && d.IsDir() || !matchGlob(pattern, rel) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil // vanished while walking
		}
		if len(res.Files) == limit {
			return errWalkLimit
		}
		res.Files = append(res.Files, globFile{Path: path.Join(virt, rel), Name: d.Name(), IsDirectory: d.IsDir(),
			Size: info.Size(), ModifiedTime: info.ModTime().UTC().Format(time.RFC3339)})
		return nil
	})
	if errors.Is(err, errWalkLimit) {
		res.Truncated, err = true, nil
	}
	if err != nil {
		return s.fsError(err, virt)
	}
	sort.SliceStable(res.Files, func(i, j int) bool { return less(res.Files[i], res.Files[j]) })
	res.TotalCount = len(res.Files)
	ok(w, "glob matched", res)
	return nil
}

// globOrder is the sort_by order: path (default), name, size or
// modified_time.
func globOrder(by string, desc bool) (func(a, b globFile) bool, error) {
	var less func(a, b globFile) bool
	switch by {
	case "", "path":
		less = func(a, b globFile) bool { return a.Path < b.Path }
	case "name":
		less = func(a, b globFile) bool { return a.Name < b.Name }
	case "size":
		less = func(a, b globFile) bool { return a.Size < b.Size }
	case "modified_time", "mtime":
		less = func(a, b globFile) bool { return a.ModifiedTime < b.ModifiedTime }
	default:
		return nil, invalid("sort_by", "sort_by must be one of path, name, size, modified_time")
	}
	if desc {
		return func(a, b globFile) bool { return less(b, a) }, nil
	}
	return less, nil
}

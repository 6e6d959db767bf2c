package manifest

import (
	"bytes"
	"errors"
	"strconv"
	"strings"

	"github.com/gpufleet/gpufleet/internal/model"
)

// SplitYAML splits a YAML stream into its documents at marker lines: a line
// that starts with "---" begins a document, one that starts with "..." ends
// one. YAML forbids both markers inside a document at the start of a line,
// so no parse is needed. Documents holding nothing but blank lines, comments
// and directives are dropped; comments and directives before a "---" stay
// with the document it begins.
//
// Each document is a sub-slice of data, starting with its "---" line where
// it has one, so line numbers in errors about it count from there; put its
// problems under its index with InDocument. The error says that data holds
// no document at all.
func SplitYAML(data []byte) ([][]byte, error) {
	var docs [][]byte
	// The current document starts at start; content says whether it has
	// any, marked whether it has its "---" line.
	start, content, marked := 0, false, false
	for off := 0; off < len(data); {
		end := len(data)
		if i := bytes.IndexByte(data[off:], '\n'); i >= 0 {
			end = off + i + 1
		}
		line := data[off:end]
		switch {
		case isMarker(line, "---"):
			if content {
				docs = append(docs, data[start:off])
			}
			if content || marked {
				start = off
			}
			content, marked = hasContent(line[3:]), true // "--- |" or "--- {a: 1}"
		case isMarker(line, "..."):
			if content {
				docs = append(docs, data[start:end])
			}
			start, content, marked = end, false, false
		case line[0] != '%': // directives introduce the next document
			content = content || hasContent(line)
		}
		off = end
	}
	if content {
		docs = append(docs, data[start:])
	}
	if len(docs) == 0 {
		return nil, errors.New("no YAML documents")
	}
	return docs, nil
}

// isMarker reports whether line is the document marker m, alone or followed
// by white space.
func isMarker(line []byte, m string) bool {
	return bytes.HasPrefix(line, []byte(m)) && (len(line) == len(m) || strings.IndexByte(" \t\r\n", line[len(m)]) >= 0)
}

// hasContent reports whether s holds more than white space and a comment.
func hasContent(s []byte) bool {
	s = bytes.TrimLeft(s, " \t\r\n")
	return len(s) > 0 && s[0] != '#'
}

// InDocument puts the problems of document i (counting from 0) of a stream
// under that document: "spec.replicas" becomes "[1].spec.replicas", and a
// problem with the whole document, at "body", moves to "[1]".
func InDocument(i int, fe model.FieldErrors) model.FieldErrors {
	if len(fe) == 0 {
		return nil
	}
	doc := "[" + strconv.Itoa(i) + "]"
	out := make(model.FieldErrors, len(fe))
	for j, e := range fe {
		switch {
		case e.Path == bodyPath:
			e.Path = doc
		case strings.HasPrefix(e.Path, "["):
			e.Path = doc + e.Path
		default:
			e.Path = doc + "." + e.Path
		}
		out[j] = e
	}
	return out
}

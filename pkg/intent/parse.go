package intent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"sigs.k8s.io/yaml"

	"github.com/sluicehq/sluice/pkg/contract"
	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// ParseError is one problem found while reading an intent file. Parse and
// ParseFiles return every problem they find, joined (errors.Join).
type ParseError struct {
	File   string // the file, "" when parsing bytes without a name
	Doc    int    // 1-based document number in the file
	Item   int    // 1-based item number when the document is a list, else 0
	Line   int    // the line of Field when it is found, else the document's first line; 0 when unknown
	LineOf string // when Line is not Field's: whose line it is and why ("the intent's first: ..."), else ""
	Intent string // "<kind>/<name>", the name, or "" when not yet known
	Field  string // e.g. "spec.vlan", "" for the whole document
	Msg    string // what is wrong
}

func (e *ParseError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		b.WriteString(": ")
	}
	if e.Doc > 0 {
		fmt.Fprintf(&b, "document %d", e.Doc)
		if e.Item > 0 {
			fmt.Fprintf(&b, " item %d", e.Item)
		}
		switch {
		case e.Line > 0 && e.LineOf != "":
			fmt.Fprintf(&b, " (line %d, %s)", e.Line, e.LineOf)
		case e.Line > 0:
			fmt.Fprintf(&b, " (line %d)", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Intent != "" {
		b.WriteString(e.Intent)
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	// The intent's name and the file's fields come from the file: escape
	// any control character in them before a terminal prints the line.
	return contract.Escape(b.String())
}

// Extensions of the files ParseFiles reads from a directory.
var fileExtensions = []string{".yaml", ".yml", ".json"}

// ParseFiles parses intent files. A path that is a directory stands for the
// *.yaml, *.yml and *.json files directly in it, in name order. Every
// problem in every file is reported, not only the first. A file larger than
// MaxFileSize is refused without being read whole.
func ParseFiles(paths ...string) ([]*sluicev1.Intent, error) { return parseFiles(paths, nil) }

// parseFiles is ParseFiles, recording in w (nil: nowhere) where each
// intent is declared.
func parseFiles(paths []string, w *Where) ([]*sluicev1.Intent, error) {
	var files []string
	inDir := map[string]bool{} // files found in a directory, not named
	var errs []error
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("read intents: %w", err))
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, fmt.Errorf("read intents: %w", err))
			continue
		}
		n := len(files)
		for _, e := range entries { // ReadDir sorts by name
			if !e.IsDir() && slices.Contains(fileExtensions, strings.ToLower(filepath.Ext(e.Name()))) {
				f := filepath.Join(p, e.Name())
				files = append(files, f)
				inDir[f] = true
			}
		}
		if len(files) == n {
			errs = append(errs, fmt.Errorf("read intents: directory %s has no .yaml, .yml or .json files", p))
		}
	}
	var out []*sluicev1.Intent
	for _, f := range files {
		read := ReadFile // a named file may be a pipe: sluice apply -f <(...)
		if inDir[f] {
			read = ReadRegular
		}
		data, err := read(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("read intents: %w", err))
			continue
		}
		ins, err := parse(f, data, w)
		if err != nil {
			errs = append(errs, err)
		}
		out = append(out, ins...)
	}
	return out, errors.Join(errs...)
}

// Parse reads the intents in data, named name in errors. data is YAML (one
// or more documents separated by ---) or JSON; a document is one intent
// object or a list of them:
//
//	kind: Layer2Network
//	name: tenant-a
//	spec: {vlan: 100, vni: 10100, nodeSelector: {matchLabels: {zone: zone-a}}}
//
// Spec fields are the protojson names of the kind's message (vlan,
// anycastGateways, nodeSelector ...; snake_case is accepted too). Every
// problem found is returned as a *ParseError, joined; the intents that
// parsed are returned alongside.
func Parse(name string, data []byte) ([]*sluicev1.Intent, error) { return parse(name, data, nil) }

// parse is Parse, recording in w (nil: nowhere) where each intent is.
func parse(name string, data []byte, w *Where) ([]*sluicev1.Intent, error) {
	var out []*sluicev1.Intent
	var errs []error
	for i, doc := range splitDocuments(data) {
		loc := ParseError{File: name, Doc: i + 1, Line: doc.line}
		js, err := yaml.YAMLToJSONStrict(doc.data)
		if err == nil {
			err = oneNode(doc.data)
		}
		if err != nil {
			loc.Msg = absoluteYAMLLines(err.Error(), doc.line)
			errs = append(errs, &loc)
			continue
		}
		var v any
		if err := decodeJSON(js, &v); err != nil {
			loc.Msg = err.Error()
			errs = append(errs, &loc)
			continue
		}
		lines := &fieldLines{data: doc.data, first: doc.line}
		switch t := v.(type) {
		case nil: // an empty document, e.g. only comments
		case []any:
			for j, item := range t {
				at := loc
				at.Item = j + 1
				in, ierrs := parseIntent(item, at)
				errs = append(errs, atFieldLines(ierrs, lines)...)
				if in != nil {
					out = append(out, in)
					w.add(in, at, lines)
				}
			}
		default:
			in, ierrs := parseIntent(t, loc)
			errs = append(errs, atFieldLines(ierrs, lines)...)
			if in != nil {
				out = append(out, in)
				w.add(in, loc, lines)
			}
		}
	}
	return out, errors.Join(errs...)
}

// atFieldLines points each error that names a field at the field's line.
func atFieldLines(errs []error, lines *fieldLines) []error {
	for _, err := range errs {
		if pe, ok := err.(*ParseError); ok && pe.Field != "" {
			if l := lines.line(pe.Item, pe.Field); l > 0 {
				pe.Line = l
			}
		}
	}
	return errs
}

type document struct {
	data []byte
	line int // 1-based line the document starts on
}

// splitDocuments splits YAML at "---" lines. JSON has none, so it stays whole.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine := 0, 1
	lineNo := 1
	for off := 0; off <= len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += off
		}
		line := bytes.TrimRight(data[off:end], " \t\r")
		if bytes.Equal(line, []byte("---")) || bytes.HasPrefix(line, []byte("--- ")) || bytes.HasPrefix(line, []byte("---\t")) {
			docs = append(docs, document{data: data[start:off], line: startLine})
			start, startLine = min(end+1, len(data)), lineNo+1
			if rest := bytes.TrimLeft(line[3:], " \t"); len(rest) > 0 && rest[0] != '#' {
				// "--- {kind: …}": the document starts on the marker's line
				// (it used to be dropped without a word).
				start, startLine = off+3, lineNo
			}
		}
		off = end + 1
		lineNo++
	}
	return append(docs, document{data: data[start:], line: startLine})
}

// oneNode fails when a document holds more than one object or list:
// YAMLToJSON converts the first and drops the rest without a word, so a
// file of JSON objects one after another (JSON lines) would apply only its
// first intent.
func oneNode(doc []byte) error {
	d := yamlv2.NewDecoder(bytes.NewReader(doc))
	var v any
	if err := d.Decode(&v); err != nil {
		return nil // empty, or not YAML: YAMLToJSONStrict says so
	}
	err := d.Decode(&v)
	switch {
	case errors.Is(err, io.EOF):
		return nil
	case err == nil:
		err = errors.New("a second document follows")
	}
	return fmt.Errorf("more than one object or list (%v): a document holds one intent, or one list of intents; start each next one with a --- line", err)
}

var yamlLine = regexp.MustCompile(`line (\d+)`)

// absoluteYAMLLines rewrites the document-relative line numbers in a YAML
// error to lines of the file.
func absoluteYAMLLines(msg string, first int) string {
	return yamlLine.ReplaceAllStringFunc(msg, func(m string) string {
		n, err := strconv.Atoi(strings.TrimPrefix(m, "line "))
		if err != nil {
			return m
		}
		return "line " + strconv.Itoa(n+first-1)
	})
}

func decodeJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	return d.Decode(v)
}

// topLevelFields are the fields of an intent document.
var topLevelFields = []string{"kind", "name", "spec"}

// parseIntent turns one decoded document into an intent, or returns every
// problem with it.
func parseIntent(v any, loc ParseError) (*sluicev1.Intent, []error) {
	fail := func(field, format string, args ...any) error {
		e := loc
		e.Field, e.Msg = field, fmt.Sprintf(format, args...)
		return &e
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, []error{fail("", "must be an intent object with fields kind, name and spec, not %s", describeJSON(v))}
	}
	var errs []error
	name, ok := obj["name"].(string)
	switch {
	case obj["name"] == nil:
		errs = append(errs, fail("name", "name is missing"))
	case !ok:
		errs = append(errs, fail("name", "must be a string, not %s (quote it)", describeJSON(obj["name"])))
	case name == "":
		errs = append(errs, fail("name", "name is missing"))
	}
	loc.Intent = name
	kind := ""
	if k, ok := obj["kind"].(string); !ok && obj["kind"] != nil {
		errs = append(errs, fail("kind", "must be a string, one of %s", strings.Join(Kinds, ", ")))
	} else if kind, ok = parseKindOK(k); !ok {
		_, err := ParseKind(k)
		errs = append(errs, fail("kind", "%v", err))
	}
	if kind != "" && name != "" {
		loc.Intent = IDOf(kind, name)
	}
	for _, k := range sortedKeys(obj) {
		if !slices.Contains(topLevelFields, k) {
			errs = append(errs, fail(k, "unknown field; an intent has only %s", strings.Join(topLevelFields, ", ")))
		}
	}
	spec, hasSpec := obj["spec"]
	if !hasSpec || spec == nil {
		errs = append(errs, fail("spec", "spec is missing"))
	}
	if kind == "" || !hasSpec || spec == nil {
		return nil, errs
	}
	in := &sluicev1.Intent{Name: name}
	msg := newSpec(in, kind)
	for _, p := range checkJSONShape(msg.ProtoReflect().Descriptor(), spec, "spec") {
		e := loc
		e.Field, e.Msg = p.path, p.msg
		errs = append(errs, &e)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	raw, err := json.Marshal(spec)
	if err == nil {
		err = protojson.UnmarshalOptions{}.Unmarshal(raw, msg)
	}
	if err != nil { // the shape check should have caught it; say what protojson said
		return nil, []error{fail("spec", "%s", protoErrorText(err))}
	}
	return in, nil
}

func parseKindOK(s string) (string, bool) {
	k, err := ParseKind(s)
	return k, err == nil
}

// newSpec sets an empty spec of kind on in and returns it.
func newSpec(in *sluicev1.Intent, kind string) proto.Message {
	switch kind {
	case KindLayer2Network:
		s := &sluicev1.Layer2Network{}
		in.Spec = &sluicev1.Intent_Layer2Network{Layer2Network: s}
		return s
	case KindVRFRoute:
		s := &sluicev1.VRFRoute{}
		in.Spec = &sluicev1.Intent_VrfRoute{VrfRoute: s}
		return s
	case KindRoutingTable:
		s := &sluicev1.RoutingTable{}
		in.Spec = &sluicev1.Intent_RoutingTable{RoutingTable: s}
		return s
	}
	panic("intent: newSpec of unknown kind " + kind)
}

var protoErrPrefix = regexp.MustCompile(`^proto:[\s\x{00a0}]*(\(line \d+:\d+\):[\s\x{00a0}]*)?`)

// protoErrorText strips protojson's prefix and position, which point into
// JSON the user never wrote.
func protoErrorText(err error) string {
	return protoErrPrefix.ReplaceAllString(err.Error(), "")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

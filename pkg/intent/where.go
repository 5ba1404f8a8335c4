package intent

import (
	"strings"

	sluicev1 "github.com/sluicehq/sluice/proto/sluicev1"
)

// Where is where in its files each intent ParseFilesWhere read is
// declared, so that a problem found once the files parsed (Validate's, or
// the configurator's field errors for an apply) names the file and the
// field's line as a parse error does.
type Where struct {
	at map[string]declared // by the intent's id as field errors name it (displayID)
}

// declared is one intent's place: its document (and item, in a list) and
// the document's lines, read again only to find a field.
type declared struct {
	file       string
	doc, item  int
	line       int // the document's first line
	fieldLines *fieldLines
}

// ParseFilesWhere is ParseFiles, and where each intent is declared (the
// first declaration of an intent given twice).
func ParseFilesWhere(paths ...string) ([]*sluicev1.Intent, *Where, error) {
	w := &Where{at: map[string]declared{}}
	intents, err := parseFiles(paths, w)
	return intents, w, err
}

// add records in, read from file at loc, whose document's lines are lines.
func (w *Where) add(in *sluicev1.Intent, loc ParseError, lines *fieldLines) {
	if w == nil {
		return
	}
	id := displayID(in)
	if _, ok := w.at[id]; !ok {
		w.at[id] = declared{file: loc.File, doc: loc.Doc, item: loc.Item, line: loc.Line, fieldLines: lines}
	}
}

// Format is FormatFieldError(fe) after where its intent is declared, as
// a parse error says it ("tenant-a.yaml: document 2 (line 7): "): the
// field's line, or the intent's first when the field is not written (a
// required one missing, a rule across fields), saying so ("(line 5, the
// intent's first: spec.vrf is not in the file)"). An intent the files do
// not declare (a stored one, in an apply's whole set) is fe alone; so is
// every fe of a nil Where.
func (w *Where) Format(fe *sluicev1.FieldError) string {
	if w == nil {
		return FormatFieldError(fe)
	}
	d, ok := w.at[fe.GetIntent()]
	if !ok {
		return FormatFieldError(fe)
	}
	loc := ParseError{File: d.file, Doc: d.doc, Item: d.item, Line: d.line}
	if l := d.fieldLines.line(d.item, fe.GetField()); l > 0 && fe.GetField() != "" {
		loc.Line = l
		return loc.Error() + FormatFieldError(fe)
	}
	if l := d.fieldLines.line(d.item, ""); l > 0 {
		loc.Line = l // the intent's first line (its item's, in a list)
	}
	switch f := fe.GetField(); {
	case f == "" || loc.Line == 0:
	case strings.ContainsAny(f, " :"): // not a path: "fleet: <rule>", a rule of the fleet verifier
		loc.LineOf = "the intent's first"
	default:
		loc.LineOf = "the intent's first: " + f + " is not in the file"
	}
	return loc.Error() + FormatFieldError(fe)
}

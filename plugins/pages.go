package plugins

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// A plugin contributes its views to hoard's web admin (/admin/) by
// declaring them (Description.AdminPages): each page is a list of
// sections, and each section names one route of the plugin's own admin
// API and how to show it. The console renders every plugin the same way
// (a table, a list of fields, a form), with every value as text, and
// calls the route through the host's forwarder like the CLI does, so a
// page can do nothing the API would refuse. The plugin ships no HTML or
// script: the host's page stays the only code the browser runs.

// Kinds of a PageSection.
const (
	// SectionTable: GET the route and show the list in the answer's Rows
	// field (or the answer's first list, or the answer itself when it is
	// one) as a table, one column per field.
	SectionTable = "table"
	// SectionObject: GET the route and show the answer's fields.
	SectionObject = "object"
	// SectionForm: inputs for Fields, and a button that makes the call
	// (Method on Path, with "{field}" in the path replaced, query fields
	// in the query and body fields in a JSON body); the answer is shown
	// as an object.
	SectionForm = "form"
)

// AdminPage is one page of a plugin's views in the web admin.
type AdminPage struct {
	// Name is the page's part of the console's address (a-z, 0-9, _, -).
	Name     string        `json:"name"`
	Title    string        `json:"title"`
	Sections []PageSection `json:"sections"`
}

// PageSection is one view of a page: one call of the plugin's admin API.
type PageSection struct {
	Title string `json:"title"`
	// Help says what the section shows or does, shown under its title.
	Help string `json:"help,omitempty"`
	Kind string `json:"kind"`
	// Method is the call's method: GET for tables and objects (the
	// default), any of GET, POST, PUT, PATCH or DELETE for a form.
	Method string `json:"method,omitempty"`
	// Path is the route below the plugin's root; a form's may hold
	// "{field}" for a path field.
	Path string `json:"path"`
	// Rows names the field of a table's answer that holds its rows.
	Rows string `json:"rows,omitempty"`
	// Fields are a form's inputs, or a table's or object's filters (query
	// fields only).
	Fields []PageField `json:"fields,omitempty"`
}

// Where a PageField goes.
const (
	FieldInPath  = "path"
	FieldInQuery = "query"
	FieldInBody  = "body"
)

// PageField is one input of a section.
type PageField struct {
	Name  string `json:"name"`
	Label string `json:"label,omitempty"`
	// In is FieldInPath, FieldInQuery or FieldInBody (the default for a
	// form).
	In string `json:"in,omitempty"`
	// Type is "text" (the default), "number" or "bool"; a body field is
	// sent as that JSON type.
	Type string `json:"type,omitempty"`
	// Required fields must be filled before the call is made.
	Required bool `json:"required,omitempty"`
}

// CallMethod is the section's method, GET when none is given.
func (s PageSection) CallMethod() string {
	if s.Method == "" {
		return "GET"
	}
	return s.Method
}

// SamplePath is the section's path with each "{field}" replaced by the
// field's name: a path of the same shape, to check a scope against (the
// host shows a caller only the sections its scopes open).
func (s PageSection) SamplePath() string {
	return pathField.ReplaceAllStringFunc(s.Path, func(m string) string { return strings.Trim(m, "{}") })
}

var pathField = regexp.MustCompile(`\{[a-z][a-z0-9_]*\}`)

// validatePages checks the pages: names unique and address-safe, known
// kinds and methods, paths below the plugin's root, and every "{field}"
// of a form's path a path field of the form, and the other way round.
func (d Description) validatePages() []error {
	var errs []error
	names := map[string]bool{}
	for _, p := range d.AdminPages {
		if !scopeNamePattern.MatchString(p.Name) {
			errs = append(errs, fmt.Errorf("admin page name %q must be 1-32 of a-z, 0-9, _ and -, starting with a letter", p.Name))
		}
		if names[p.Name] {
			errs = append(errs, fmt.Errorf("admin page %q is described twice", p.Name))
		}
		names[p.Name] = true
		if len(p.Sections) == 0 {
			errs = append(errs, fmt.Errorf("admin page %q has no section", p.Name))
		}
		for _, s := range p.Sections {
			errs = append(errs, s.validate(p.Name)...)
		}
	}
	return errs
}

func (s PageSection) validate(page string) []error {
	var errs []error
	where := fmt.Sprintf("admin page %q, section %q", page, s.Title)
	switch s.Kind {
	case SectionTable, SectionObject:
		if s.CallMethod() != "GET" {
			errs = append(errs, fmt.Errorf("%s: a %s reads with GET, not %s", where, s.Kind, s.Method))
		}
	case SectionForm:
		if !slices.Contains([]string{"GET", "POST", "PUT", "PATCH", "DELETE"}, s.CallMethod()) {
			errs = append(errs, fmt.Errorf("%s: method %q is not GET, POST, PUT, PATCH or DELETE", where, s.Method))
		}
	default:
		errs = append(errs, fmt.Errorf("%s: kind %q is not table, object or form", where, s.Kind))
	}
	if !strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, "?#") {
		errs = append(errs, fmt.Errorf("%s: path %q must start with / and hold no query", where, s.Path))
	}
	inPath := map[string]bool{}
	for _, m := range pathField.FindAllString(s.Path, -1) {
		inPath[strings.Trim(m, "{}")] = true
	}
	fields := map[string]bool{}
	for _, f := range s.Fields {
		if fields[f.Name] {
			errs = append(errs, fmt.Errorf("%s: field %q is described twice", where, f.Name))
		}
		fields[f.Name] = true
		if !fieldNamePattern.MatchString(f.Name) {
			errs = append(errs, fmt.Errorf("%s: field name %q must be 1-64 of a-z, 0-9 and _, starting with a letter", where, f.Name))
		}
		if !slices.Contains([]string{"", "text", "number", "bool"}, f.Type) {
			errs = append(errs, fmt.Errorf("%s: field %q: type %q is not text, number or bool", where, f.Name, f.Type))
		}
		switch f.In {
		case FieldInPath:
			if !inPath[f.Name] {
				errs = append(errs, fmt.Errorf("%s: path field %q is not in the path %q", where, f.Name, s.Path))
			}
		case FieldInQuery:
		case "", FieldInBody:
			if s.Kind != SectionForm {
				errs = append(errs, fmt.Errorf("%s: field %q: a %s takes query fields only", where, f.Name, s.Kind))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: field %q: in %q is not path, query or body", where, f.Name, f.In))
		}
	}
	for name := range inPath {
		if s.Kind != SectionForm {
			errs = append(errs, fmt.Errorf("%s: a %s's path holds no {field}", where, s.Kind))
			break
		}
		if i := slices.IndexFunc(s.Fields, func(f PageField) bool { return f.Name == name }); i < 0 || s.Fields[i].In != FieldInPath {
			errs = append(errs, fmt.Errorf("%s: {%s} in the path is not a path field", where, name))
		}
	}
	return errs
}

var fieldNamePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

package namewire

// The whole-value decoders below are what the tests compare with the
// generated code and protojson; the agent reads tables name by name
// (EachName, WalkJSONTable) and never needs them.

// UnmarshalNameTable decodes a marshalled NameTable whole, the reference
// the tests compare with the generated code. A name given twice keeps its
// last value, as proto does.
func UnmarshalNameTable(b []byte) (*NameTable, error) {
	settings, err := TableSettings(b)
	if err != nil {
		return nil, err
	}
	t, err := Collect(func(name func(host, info []byte) error, zone func(z string) error) error {
		return EachName(b, name, zone)
	})
	if err != nil {
		return nil, err
	}
	t.Settings = settings
	return t, nil
}

// UnquoteJSON decodes b, one JSON string token with its quotes (and white
// space around it), as protojson reads a string (the keys of a table file).
func UnquoteJSON(b []byte) (string, error) {
	s := &jscan{b: b}
	v, err := s.str()
	if err != nil {
		return "", err
	}
	if s.ws(); s.i != len(s.b) {
		return "", s.errorf("data after the string")
	}
	return v, nil
}

// DecodeJSONStrings decodes b, one JSON value, as protojson reads a
// repeated string field: a list of strings, or null for none.
func DecodeJSONStrings(b []byte) ([]string, error) {
	s := &jscan{b: b}
	var out []string
	if !s.null() {
		var err error
		if out, err = s.strings(nil); err != nil {
			return nil, err
		}
	}
	if s.ws(); s.i != len(s.b) {
		return nil, s.errorf("data after the list")
	}
	return out, nil
}

// DecodeJSONSettings decodes b, one JSON value, as protojson reads a
// NameTable's settings field: an AgentSettings object, or null for none
// (nil). Unknown fields and enum values are errors.
func DecodeJSONSettings(b []byte) (*AgentSettings, error) {
	s := &jscan{b: b}
	var out *AgentSettings
	if !s.null() {
		out = new(AgentSettings)
		if err := s.settings(out); err != nil {
			return nil, err
		}
	}
	if s.ws(); s.i != len(s.b) {
		return nil, s.errorf("data after the settings")
	}
	return out, nil
}

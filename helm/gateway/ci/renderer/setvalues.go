package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The --set family, as helm reads it:
//
//	line   := pair { "," pair }
//	pair   := path "=" value
//	path   := name { "[" INDEX "]" } { "." name { "[" INDEX "]" } }
//	value  := "{" scalar { "," scalar } "}" | scalar
//
// A backslash makes the next character literal anywhere (`\.` in a name, `\,` in a value).

type scalarKind int

const (
	scalarTyped       scalarKind = iota // --set: true/false/null/integers become typed
	scalarString                        // --set-string
	scalarFileContent                   // --set-file: the value names a file whose content is the value
)

// helm refuses larger list indices.
const setIndexMax = 65536

type pathStep struct {
	key     string
	index   int
	isIndex bool
}

// literalRune is one character of the line, with whether a backslash made it literal.
type literalRune struct {
	value   rune
	escaped bool
}

func unescape(line string) []literalRune {
	out := make([]literalRune, 0, len(line))
	runes := []rune(line)
	for index := 0; index < len(runes); index++ {
		if runes[index] == '\\' && index+1 < len(runes) {
			index++
			out = append(out, literalRune{runes[index], true})
			continue
		}
		out = append(out, literalRune{runes[index], false})
	}
	return out
}

func isSeparator(character literalRune, separators string) bool {
	return !character.escaped && strings.ContainsRune(separators, character.value)
}

func text(characters []literalRune) string {
	var out strings.Builder
	for _, character := range characters {
		out.WriteRune(character.value)
	}
	return out.String()
}

func parseSetLine(line string, into map[string]interface{}, kind scalarKind) error {
	characters := unescape(line)
	position := 0
	for position < len(characters) {
		start := position
		for position < len(characters) && !isSeparator(characters[position], "=,") {
			position++
		}
		if position >= len(characters) || characters[position].value != '=' {
			return fmt.Errorf("key %q has no value", text(characters[start:position]))
		}
		steps, err := parsePath(characters[start:position])
		if err != nil {
			return err
		}
		position++ // '='

		var value interface{}
		if position < len(characters) && isSeparator(characters[position], "{") && kind != scalarFileContent {
			end := position + 1
			for end < len(characters) && !isSeparator(characters[end], "}") {
				end++
			}
			if end >= len(characters) {
				return fmt.Errorf("list for %q has no closing }", text(characters[start:position-1]))
			}
			var items []interface{}
			itemStart := position + 1
			for cursor := itemStart; cursor <= end; cursor++ {
				if cursor == end || isSeparator(characters[cursor], ",") {
					item, err := scalar(characters[itemStart:cursor], kind)
					if err != nil {
						return err
					}
					items = append(items, item)
					itemStart = cursor + 1
				}
			}
			value = items
			position = end + 1
			if position < len(characters) && !isSeparator(characters[position], ",") {
				return fmt.Errorf("unexpected %q after the list for %q", string(characters[position].value), text(characters[start:position]))
			}
		} else {
			valueStart := position
			for position < len(characters) && !isSeparator(characters[position], ",") {
				position++
			}
			value, err = scalar(characters[valueStart:position], kind)
			if err != nil {
				return err
			}
		}
		if position < len(characters) {
			position++ // ','
		}

		// into is a map, so assign fills it in place.
		if _, err := assign(into, steps, value); err != nil {
			return err
		}
	}
	return nil
}

func parsePath(characters []literalRune) ([]pathStep, error) {
	var steps []pathStep
	var name []literalRune
	flushName := func() error {
		if len(name) == 0 {
			return fmt.Errorf("empty name in key %q", text(characters))
		}
		steps = append(steps, pathStep{key: text(name)})
		name = nil
		return nil
	}
	for position := 0; position < len(characters); position++ {
		character := characters[position]
		switch {
		case isSeparator(character, "."):
			if len(name) > 0 {
				if err := flushName(); err != nil {
					return nil, err
				}
			} else if len(steps) == 0 || !steps[len(steps)-1].isIndex {
				return nil, fmt.Errorf("empty name in key %q", text(characters))
			}
		case isSeparator(character, "["):
			if len(name) > 0 {
				if err := flushName(); err != nil {
					return nil, err
				}
			} else if len(steps) == 0 {
				return nil, fmt.Errorf("key %q starts with an index", text(characters))
			}
			end := position + 1
			for end < len(characters) && !isSeparator(characters[end], "]") {
				end++
			}
			if end >= len(characters) {
				return nil, fmt.Errorf("unclosed [ in key %q", text(characters))
			}
			index, err := strconv.Atoi(text(characters[position+1 : end]))
			if err != nil || index < 0 || index > setIndexMax {
				return nil, fmt.Errorf("bad list index in key %q", text(characters))
			}
			steps = append(steps, pathStep{index: index, isIndex: true})
			position = end
		default:
			name = append(name, character)
		}
	}
	if len(name) > 0 {
		if err := flushName(); err != nil {
			return nil, err
		}
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("empty key")
	}
	return steps, nil
}

func scalar(characters []literalRune, kind scalarKind) (interface{}, error) {
	value := text(characters)
	switch kind {
	case scalarString:
		return value, nil
	case scalarFileContent:
		content, err := os.ReadFile(value)
		if err != nil {
			return nil, err
		}
		return string(content), nil
	}
	switch {
	case strings.EqualFold(value, "true"):
		return true, nil
	case strings.EqualFold(value, "false"):
		return false, nil
	case strings.EqualFold(value, "null"):
		return nil, nil
	case value == "0":
		return int64(0), nil
	}
	// helm keeps a leading zero (an id, a zip code) as a string.
	if value != "" && value[0] != '0' {
		if number, err := strconv.ParseInt(value, 10, 64); err == nil {
			return number, nil
		}
	}
	return value, nil
}

// assign puts value at the path inside current, creating maps and lists on the way.
func assign(current interface{}, steps []pathStep, value interface{}) (interface{}, error) {
	if len(steps) == 0 {
		return value, nil
	}
	step := steps[0]
	if step.isIndex {
		list, _ := current.([]interface{})
		for len(list) <= step.index {
			list = append(list, nil)
		}
		child, err := assign(list[step.index], steps[1:], value)
		if err != nil {
			return nil, err
		}
		list[step.index] = child
		return list, nil
	}
	object, ok := current.(map[string]interface{})
	if !ok {
		object = map[string]interface{}{}
	}
	child, err := assign(object[step.key], steps[1:], value)
	if err != nil {
		return nil, err
	}
	object[step.key] = child
	return object, nil
}

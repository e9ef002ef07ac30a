package policy

import (
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/mm2go/mm2go/internal/javaregex"
)

// Filter is a compiled include/exclude pair of Java regex lists with MM2's semantics:
// each list is joined with '|' into one Java pattern that must match the whole name, an empty
// include list matches nothing, an empty exclude list excludes nothing, and excludes win over
// includes. See NewFilter for how Java patterns run on Go's RE2 engine.
//
// A Filter is immutable and safe for concurrent use. A nil *Filter matches nothing.
type Filter struct {
	include *regexp.Regexp // nil: matches nothing
	exclude *regexp.Regexp // nil: excludes nothing
}

// PatternError reports a pattern of a filter list that cannot be used: Java would reject it, or it
// uses a Java feature that RE2 lacks and that has no exact translation (look-around,
// back-references, possessive quantifiers, atomic groups, Unicode property classes...).
type PatternError struct {
	// List is "include" or "exclude".
	List string
	// Index is the position of the pattern in its list, from 0.
	Index int
	// Pattern is the pattern as given.
	Pattern string
	// Err says what is wrong.
	Err error
}

func (e *PatternError) Error() string {
	return e.List + " pattern " + strconv.Quote(e.Pattern) + ": " + e.Err.Error()
}

func (e *PatternError) Unwrap() error { return e.Err }

// NewFilter compiles an include and an exclude list of Java regular expressions, such as MM2's
// topics / topics.exclude or groups / groups.exclude. Like MM2 it joins each list with '|' and
// requires the joined pattern to match the whole name, so top-level inline flags such as (?i) stay
// in effect for the patterns after them.
//
// The Java patterns are translated to RE2 so that they accept exactly the names Java accepts
// (checked against java.util.regex of JDK 17 and 25): Java's '.', \s, \h, \v, POSIX \p{...}
// classes, ASCII-only (?i), \Q...\E quoting and its escapes keep their Java meaning. Constructs
// without an exact RE2 equivalent are rejected rather than approximated: look-around,
// back-references, possessive quantifiers, atomic groups, \b, Unicode property classes such as
// \p{L}, class unions and intersections, the flags (?m) (?u) (?U) (?x) (?d), and a '$' or \Z that
// more pattern could follow (Java also lets those match before a final line terminator). Patterns
// that Java itself rejects are rejected too.
//
// The error, if any, joins one *PatternError per bad pattern, naming the list, the pattern and what
// is wrong; nothing is compiled then.
func NewFilter(include, exclude []string) (*Filter, error) {
	inc, incErrs := compileJavaList("include", include)
	exc, excErrs := compileJavaList("exclude", exclude)
	if err := errors.Join(append(incErrs, excErrs...)...); err != nil {
		return nil, err
	}
	return &Filter{include: inc, exclude: exc}, nil
}

// compileJavaList compiles one list, returning nil for an empty list, or one *PatternError per bad
// pattern.
func compileJavaList(list string, patterns []string) (*regexp.Regexp, []error) {
	if len(patterns) == 0 {
		return nil, nil
	}
	var errs []error
	parts := make([]string, 0, len(patterns))
	var st javaregex.ListState
	for i, p := range patterns {
		re2, openQuote, err := javaregex.Translate(p, &st)
		if err == nil && openQuote && i < len(patterns)-1 {
			err = errors.New(`\Q without \E: in MM2's joined pattern it would quote the patterns after it too`)
		}
		if err == nil {
			_, err = regexp.Compile(`^(?:` + re2 + `)$`)
		}
		if err != nil {
			errs = append(errs, &PatternError{List: list, Index: i, Pattern: p, Err: err})
			continue
		}
		parts = append(parts, re2)
	}
	if len(errs) > 0 {
		return nil, errs
	}
	re, err := regexp.Compile(`^(?:` + strings.Join(parts, "|") + `)$`)
	if err != nil { // each part compiled alone; only RE2's size limit can fail here
		return nil, []error{&PatternError{List: list, Index: len(patterns) - 1, Pattern: patterns[len(patterns)-1], Err: err}}
	}
	return re, nil
}

// Match reports whether name is included and not excluded.
func (f *Filter) Match(name string) bool {
	return f != nil && f.include != nil && f.include.MatchString(name) && !f.Excluded(name)
}

// Excluded reports whether name matches the exclude list. MM2's config-property filter uses only
// this: a topic config key is synced unless it is excluded.
func (f *Filter) Excluded(name string) bool {
	return f != nil && f.exclude != nil && f.exclude.MatchString(name)
}

// DefaultTopicsInclude returns the default of "topics": every topic.
func DefaultTopicsInclude() []string { return []string{".*"} }

// DefaultTopicsExclude returns the default of "topics.exclude" in MM2 4.x: Connect and MM2
// internal topics (suffix -internal or .internal), ".replica" topics and Kafka's "__" topics.
func DefaultTopicsExclude() []string {
	return []string{`.*[\-\.]internal`, `.*\.replica`, `__.*`}
}

// DefaultGroupsInclude returns the default of "groups": every consumer group.
func DefaultGroupsInclude() []string { return []string{".*"} }

// DefaultGroupsExclude returns the default of "groups.exclude" in MM2 4.x: console consumers,
// Connect workers and Kafka's "__" groups.
func DefaultGroupsExclude() []string {
	return []string{`console-consumer-.*`, `connect-.*`, `__.*`}
}

// DefaultConfigPropertiesExclude returns the default of "config.properties.exclude" in MM2 4.x:
// topic config keys that are never synced to remote topics.
func DefaultConfigPropertiesExclude() []string {
	return []string{
		`follower\.replication\.throttled\.replicas`,
		`leader\.replication\.throttled\.replicas`,
		`message\.timestamp\.difference\.max\.ms`,
		`message\.timestamp\.type`,
		`unclean\.leader\.election\.enable`,
		`min\.insync\.replicas`,
	}
}

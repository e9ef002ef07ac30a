// Package javaregex translates the Java regular expressions of MM2's topics/groups/config-property lists
// (java.util.regex.Pattern, no compile flags) into RE2 syntax for Go's regexp package, so that a
// translated pattern accepts exactly the strings the Java pattern accepts under Matcher.matches().
//
// What is translated, and how:
//   - literals, '|', groups ((...), (?:...), (?<name>...)), greedy and lazy quantifiers
//     (*, +, ?, {n}, {n,}, {n,m} up to RE2's limit of 1000), '^', '$', \A, \z and \Z;
//   - '.' becomes the set Java means: everything but \n, \r, U+0085, U+2028, U+2029 (any character
//     under (?s));
//   - \Q...\E quoting, removed first exactly as Java does before parsing;
//   - character classes with ranges, negation and escapes; Java's \s (which includes \x0B), \h,
//     \v, \H, \V, \d, \w, \D, \W, \S, and the POSIX classes \p{Alpha}, \p{Lower}... (ASCII in Java
//     too), negated with \P;
//   - (?i) and (?s), including scoped (?i:...) and (?-i); Java's (?i) folds only ASCII letters, so
//     it is expanded into explicit classes ([kK]) instead of using RE2's Unicode folding, which would
//     also match U+212A KELVIN SIGN for k;
//   - escapes of single characters: \t \n \r \f \a \e, \0octal, \xhh, \x{h..h}, \uhhhh (surrogate
//     pairs joined), \cX, and a backslash before any other non-letter.
//
// What is rejected, with a message naming the construct: look-ahead and look-behind, atomic groups,
// possessive quantifiers, back-references, \b \B \G \R \X \N{...}, Unicode and java.lang.Character
// property classes (\p{L}, \p{IsLatin}, \p{javaLowerCase}: Java's and Go's Unicode tables differ),
// nested class unions [a[b]] and intersections [a&&b], the flags m d u U x c, lone surrogates, and
// everything Java itself rejects.
//
// '$' and \Z need care: in Java they also match just before a line terminator that ends the input,
// which RE2 cannot express, so "a$\n" accepts "a\n" in Java. The translator therefore accepts them
// only where nothing that consumes a character can follow them in a match (the end of a pattern or
// of an alternative, possibly inside groups that are not repeated), where both mean "end of input",
// and rejects them elsewhere.
package javaregex

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// javaFlags are the Java inline flags the translator implements itself.
type javaFlags struct {
	caseInsensitive bool // (?i) without (?u): ASCII letters only
	dotAll          bool // (?s)
}

// ListState is what one item of an MM2 pattern list hands to the next. MM2 joins the items with
// '|' into one Java pattern, so top-level inline flags stay in effect for the following items, and
// group names must be unique across all of them.
type ListState struct {
	flags javaFlags
	names map[string]bool
}

// Translate translates one Java pattern, starting from and updating st (nil for a pattern
// on its own). It also reports whether the pattern ended inside a \Q quote, which in Java would
// quote the rest of the joined list too. On error st is left unchanged.
func Translate(pattern string, st *ListState) (re2 string, openQuote bool, err error) {
	if st == nil {
		st = &ListState{}
	}
	if !utf8.ValidString(pattern) {
		return "", false, errors.New("pattern is not valid UTF-8")
	}
	src, openQuote := removeQuoting([]rune(pattern))
	t := javaTranslator{src: src, flags: st.flags, names: map[string]bool{}}
	for name := range st.names {
		t.names[name] = true
	}
	if err := t.run(); err != nil {
		return "", false, err
	}
	st.flags, st.names = t.flags, t.names
	return t.out.String(), openQuote, nil
}

// removeQuoting rewrites \Q...\E the way Java's Pattern does before parsing: inside a quote,
// letters and non-ASCII characters are kept, other ASCII characters get a backslash, a digit that
// opens the quote becomes \x3N (so it cannot extend an escape before the quote), and a backslash not
// followed by E becomes \\. An unterminated \Q quotes to the end. It reports whether the pattern
// ended inside a quote.
func removeQuoting(src []rune) ([]rune, bool) {
	i := firstQuote(src)
	if i < 0 {
		return src, false
	}
	out := make([]rune, 0, len(src)+8)
	out = append(out, src[:i]...)
	i += 2
	inQuote, begin := true, true
	for i < len(src) {
		c := src[i]
		i++
		switch {
		case c >= utf8.RuneSelf || isASCIILetter(c):
			out = append(out, c)
		case isASCIIDigit(c):
			if begin {
				out = append(out, '\\', 'x', '3')
			}
			out = append(out, c)
		case c != '\\':
			if inQuote {
				out = append(out, '\\')
			}
			out = append(out, c)
		case inQuote:
			if i < len(src) && src[i] == 'E' {
				i++
				inQuote = false
			} else {
				out = append(out, '\\', '\\')
			}
		default: // a backslash outside a quote
			if i < len(src) && src[i] == 'Q' {
				i++
				inQuote, begin = true, true
				continue
			}
			out = append(out, c)
			if i < len(src) {
				out = append(out, src[i])
				i++
			}
		}
		begin = false
	}
	return out, inQuote
}

// firstQuote returns the index of the first \Q that is not itself escaped, or -1.
func firstQuote(src []rune) int {
	for i := 0; i < len(src)-1; {
		switch {
		case src[i] != '\\':
			i++
		case src[i+1] != 'Q':
			i += 2
		default:
			return i
		}
	}
	return -1
}

type javaTranslator struct {
	src   []rune
	pos   int
	out   strings.Builder
	flags javaFlags
	saved []javaFlags // flags to restore at the ')' of each open group
	names map[string]bool
	// afterFlags is set right after a flag-only group such as (?i), which emits nothing: a
	// quantifier there would attach to the previous atom in RE2, while Java rejects it.
	afterFlags bool
	// ends tracks, per open group (index 0 is the top level), whether a '$' or \Z could be followed
	// by what comes next; see noteEnd and consume.
	ends []endState
	// closedEnd is set right after a ')' whose group holds such an anchor, so that repeating the
	// group can be refused.
	closedEnd bool
}

// endState records '$' and \Z anchors of one group level: active ones can be followed by the next
// token of the current alternative; parked ones sit in an earlier alternative of the group and can
// be followed by whatever comes after the group.
type endState struct {
	active, parked bool
}

func (t *javaTranslator) level() *endState { return &t.ends[len(t.ends)-1] }

// noteEnd records a '$' or \Z.
func (t *javaTranslator) noteEnd() { t.level().active = true }

// consume is called before a token that matches a character; it fails if a '$' or \Z could come
// right before it.
func (t *javaTranslator) consume() error {
	for _, l := range t.ends {
		if l.active {
			return errors.New(`'$' or \Z followed by more pattern is not supported: Java also matches it before a final line terminator, which RE2 cannot express; use it only at the end`)
		}
	}
	return nil
}

// repeatGroup is called for a quantifier that may repeat the group just closed.
func (t *javaTranslator) repeatGroup() error {
	if t.closedEnd {
		return errors.New(`a repeated group containing '$' or \Z is not supported: Java also matches it before a final line terminator, which RE2 cannot express`)
	}
	return nil
}

func (t *javaTranslator) eof() bool { return t.pos >= len(t.src) }

func (t *javaTranslator) peek() rune {
	if t.eof() {
		return -1
	}
	return t.src[t.pos]
}

// peekAt returns the rune i positions ahead, or -1 past the end.
func (t *javaTranslator) peekAt(i int) rune {
	if t.pos+i >= len(t.src) {
		return -1
	}
	return t.src[t.pos+i]
}

func (t *javaTranslator) next() rune {
	c := t.src[t.pos]
	t.pos++
	return c
}

func (t *javaTranslator) run() error {
	t.ends = []endState{{}}
	for !t.eof() {
		c := t.next()
		afterFlags, closedEnd := t.afterFlags, t.closedEnd
		t.afterFlags, t.closedEnd = false, false
		var err error
		switch c {
		case '\\':
			err = t.escape()
		case '[':
			if err = t.consume(); err == nil {
				err = t.class()
			}
		case '(':
			err = t.openGroup()
		case ')':
			err = t.closeGroup()
		case '.':
			if err = t.consume(); err != nil {
				break
			}
			if t.flags.dotAll {
				t.out.WriteString(`(?s:.)`)
			} else {
				t.out.WriteString(`[^\n\r\x{85}\x{2028}\x{2029}]`)
			}
		case '^':
			t.out.WriteByte('^')
		case '$':
			t.noteEnd()
			t.out.WriteByte('$')
		case '|':
			l := t.level()
			l.parked = l.parked || l.active
			l.active = false
			t.out.WriteByte('|')
		case '*', '+', '?', '{':
			if afterFlags {
				return fmt.Errorf("quantifier %q after an inline flag group has nothing to repeat", c)
			}
			t.closedEnd = closedEnd
			switch c {
			case '{':
				err = t.counted()
			case '?':
				t.out.WriteByte('?')
				err = t.quantifierSuffix("?")
			default:
				if err = t.repeatGroup(); err == nil {
					t.out.WriteRune(c)
					err = t.quantifierSuffix(string(c))
				}
			}
			t.closedEnd = false
		default:
			if err = t.consume(); err == nil {
				t.literal(c)
			}
		}
		if err != nil {
			return err
		}
	}
	if len(t.saved) > 0 {
		return errors.New("unclosed group: missing ')'")
	}
	return nil
}

// literal writes a character that must match itself, folding ASCII letters under (?i).
func (t *javaTranslator) literal(r rune) {
	if t.flags.caseInsensitive {
		if l, u, ok := asciiCasePair(r); ok {
			t.out.WriteByte('[')
			t.out.WriteRune(l)
			t.out.WriteRune(u)
			t.out.WriteByte(']')
			return
		}
	}
	writeRuneEscaped(&t.out, r)
}

// quantifierSuffix handles what may follow a quantifier: '?' (lazy, same in RE2) or '+'
// (possessive, which RE2 lacks).
func (t *javaTranslator) quantifierSuffix(q string) error {
	switch t.peek() {
	case '?':
		t.pos++
		t.out.WriteByte('?')
	case '+':
		return fmt.Errorf("possessive quantifier %q is not supported by RE2", q+"+")
	}
	return nil
}

// counted translates {n}, {n,} and {n,m}; the '{' is consumed.
func (t *javaTranslator) counted() error {
	const limit = 1000 // RE2's largest repeat count
	lo, ok := t.number()
	if !ok {
		return errors.New(`'{' that does not start a repetition {n}, {n,} or {n,m} (Java rejects it; write \{ for a literal brace)`)
	}
	hi, unbounded := lo, false
	if t.peek() == ',' {
		t.pos++
		if t.peek() == '}' {
			unbounded = true
		} else if hi, ok = t.number(); !ok {
			return errors.New("unclosed repetition: want {n,m}")
		}
	}
	if t.peek() != '}' {
		return errors.New("unclosed repetition: missing '}'")
	}
	t.pos++
	if !unbounded && hi < lo {
		return fmt.Errorf("repetition {%d,%d} has its maximum below its minimum", lo, hi)
	}
	if lo > limit || (!unbounded && hi > limit) {
		return fmt.Errorf("repetition count above %d is not supported by RE2", limit)
	}
	if unbounded || hi > 1 {
		if err := t.repeatGroup(); err != nil {
			return err
		}
	}
	switch {
	case unbounded:
		fmt.Fprintf(&t.out, "{%d,}", lo)
	case lo == hi:
		fmt.Fprintf(&t.out, "{%d}", lo)
	default:
		fmt.Fprintf(&t.out, "{%d,%d}", lo, hi)
	}
	return t.quantifierSuffix("{…}")
}

// number reads decimal digits; values beyond a million are clamped, which only matters for the
// "above 1000" error.
func (t *javaTranslator) number() (int, bool) {
	n, digits := 0, 0
	for isASCIIDigit(t.peek()) {
		if n < 1_000_000 {
			n = n*10 + int(t.next()-'0')
		} else {
			t.pos++
		}
		digits++
	}
	return n, digits > 0
}

func (t *javaTranslator) openGroup() error {
	if t.peek() != '?' {
		t.pushGroup()
		t.out.WriteString("(?:")
		return nil
	}
	t.pos++
	if t.eof() {
		return errors.New("unclosed group: missing ')'")
	}
	switch c := t.next(); c {
	case ':':
		t.pushGroup()
		t.out.WriteString("(?:")
		return nil
	case '=', '!':
		return fmt.Errorf("look-ahead %q is not supported by RE2", "(?"+string(c))
	case '>':
		return errors.New(`atomic group "(?>" is not supported by RE2`)
	case '<':
		if c2 := t.peek(); c2 == '=' || c2 == '!' {
			return fmt.Errorf("look-behind %q is not supported by RE2", "(?<"+string(c2))
		}
		return t.namedGroup()
	case '$', '@':
		return fmt.Errorf("unknown group type %q (Java rejects it)", "(?"+string(c))
	default:
		t.pos--
		return t.flagGroup()
	}
}

// namedGroup handles (?<name>...) after "(?<". Java names are an ASCII letter followed by ASCII
// letters and digits; the name only matters to back-references, which are rejected, so the group
// becomes a plain one.
func (t *javaTranslator) namedGroup() error {
	start := t.pos
	if !isASCIILetter(t.peek()) {
		return errors.New("named group name must start with an ASCII letter (Java rejects it)")
	}
	for isASCIILetter(t.peek()) || isASCIIDigit(t.peek()) {
		t.pos++
	}
	if t.peek() != '>' {
		return errors.New("named group name must be ASCII letters and digits followed by '>' (Java rejects it)")
	}
	name := string(t.src[start:t.pos])
	t.pos++
	if t.names[name] {
		return fmt.Errorf("named group <%s> is defined twice in the list (Java rejects it)", name)
	}
	t.names[name] = true
	t.pushGroup()
	t.out.WriteString("(?:")
	return nil
}

// flagGroup handles (?flags) and (?flags:...) after "(?".
func (t *javaTranslator) flagGroup() error {
	f := t.flags
	on := true
	for {
		c := t.peek()
		switch c {
		case 'i':
			f.caseInsensitive = on
		case 's':
			f.dotAll = on
		case 'm', 'd', 'u', 'U', 'x', 'c':
			if on {
				return unsupportedFlag(c)
			}
			// Turning off a flag that can never be on is a no-op.
		case '-':
			if !on {
				return errors.New("unknown inline modifier: second '-' in a flag group (Java rejects it)")
			}
			on = false
		case ')':
			t.pos++
			t.flags = f
			t.afterFlags = true
			return nil
		case ':':
			t.pos++
			t.pushGroup()
			t.flags = f
			t.out.WriteString("(?:")
			return nil
		case -1:
			return errors.New("unclosed group: missing ')'")
		default:
			return fmt.Errorf("unknown inline modifier %q (Java rejects it)", c)
		}
		t.pos++
	}
}

func unsupportedFlag(c rune) error {
	why := map[rune]string{
		'm': "multiline mode (?m): Java and RE2 disagree on line terminators other than \\n",
		'd': "UNIX_LINES mode (?d)",
		'u': "Unicode case folding (?u): Java's and RE2's case tables differ",
		'U': "UNICODE_CHARACTER_CLASS mode (?U)",
		'x': "comments mode (?x)",
		'c': "canonical equivalence (?c)",
	}[c]
	return fmt.Errorf("%s is not supported", why)
}

func (t *javaTranslator) pushGroup() {
	t.saved = append(t.saved, t.flags)
	t.ends = append(t.ends, endState{})
}

func (t *javaTranslator) closeGroup() error {
	if len(t.saved) == 0 {
		return errors.New("unmatched ')' (Java rejects it)")
	}
	t.flags = t.saved[len(t.saved)-1]
	t.saved = t.saved[:len(t.saved)-1]
	inner := *t.level()
	t.ends = t.ends[:len(t.ends)-1]
	if inner.active || inner.parked {
		t.noteEnd()
		t.closedEnd = true
	}
	t.out.WriteByte(')')
	return nil
}

// escape translates a backslash sequence outside a character class; the '\' is consumed.
func (t *javaTranslator) escape() error {
	if t.eof() {
		return errors.New(`trailing '\' (Java rejects it)`)
	}
	switch c := t.peek(); c {
	case 'A':
		t.pos++
		t.out.WriteString(`\A`)
		return nil
	case 'z':
		t.pos++
		t.out.WriteString(`\z`)
		return nil
	case 'Z': // like '$'; see the file comment
		t.pos++
		t.noteEnd()
		t.out.WriteString(`\z`)
		return nil
	case 'b', 'B':
		return fmt.Errorf(`word boundary \%c is not supported (Java's idea of a word character in \b differs between JDK versions and from RE2)`, c)
	case 'G':
		return errors.New(`\G is not supported by RE2`)
	case 'R':
		return errors.New(`linebreak matcher \R is not supported by RE2`)
	case 'X':
		return errors.New(`grapheme cluster \X is not supported by RE2`)
	case 'k':
		return errors.New(`back-reference \k<name> is not supported by RE2`)
	}
	if c := t.peek(); c >= '1' && c <= '9' {
		return fmt.Errorf(`back-reference \%c is not supported by RE2`, c)
	}
	if err := t.consume(); err != nil {
		return err
	}
	e, err := t.escapeAtom(false, false)
	if err != nil {
		return err
	}
	if e.set != "" {
		t.out.WriteString("[" + e.set + "]")
		return nil
	}
	t.literal(e.lit)
	return nil
}

// escapeItem is what a backslash sequence stands for: one character, or a set of characters given
// as the body of an RE2 character class.
type escapeItem struct {
	lit rune
	set string
}

// horizontalSpace is Java's \h, Perl's horizontal whitespace.
func horizontalSpace() [][2]rune {
	return [][2]rune{{0x09, 0x09}, {0x20, 0x20}, {0xa0, 0xa0}, {0x1680, 0x1680}, {0x180e, 0x180e},
		{0x2000, 0x200a}, {0x202f, 0x202f}, {0x205f, 0x205f}, {0x3000, 0x3000}}
}

// verticalSpace is Java's \v (since JDK 8): \n \x0B \f \r U+0085 U+2028 U+2029.
func verticalSpace() [][2]rune {
	return [][2]rune{{0x0a, 0x0d}, {0x85, 0x85}, {0x2028, 0x2029}}
}

// escapeAtom reads an escape shared by both contexts, after the '\'. isRange says the escape is a
// range endpoint or is followed by '-' in a class, where Java reads \v as the single character 0x0B.
func (t *javaTranslator) escapeAtom(inClass, isRange bool) (escapeItem, error) {
	c := t.next()
	switch c {
	case '0':
		return t.octal()
	case 'a':
		return escapeItem{lit: 0x07}, nil
	case 'e':
		return escapeItem{lit: 0x1b}, nil
	case 'f':
		return escapeItem{lit: '\f'}, nil
	case 'n':
		return escapeItem{lit: '\n'}, nil
	case 'r':
		return escapeItem{lit: '\r'}, nil
	case 't':
		return escapeItem{lit: '\t'}, nil
	case 'c':
		if t.eof() {
			return escapeItem{}, errors.New(`\c without a control character (Java rejects it)`)
		}
		return escapeItem{lit: t.next() ^ 64}, nil
	case 'x':
		return t.hex()
	case 'u':
		return t.unicode()
	case 'd':
		return escapeItem{set: `0-9`}, nil
	case 'D':
		return escapeItem{set: `\D`}, nil
	case 'w':
		return escapeItem{set: `0-9A-Za-z_`}, nil
	case 'W':
		return escapeItem{set: `\W`}, nil
	case 's': // Java's ASCII space [ \t\n\x0B\f\r]: RE2's \s lacks \x0B, its [:space:] has it
		return escapeItem{set: `[:space:]`}, nil
	case 'S':
		return escapeItem{set: `[:^space:]`}, nil
	case 'h':
		return escapeItem{set: rangesBody(horizontalSpace())}, nil
	case 'H':
		return escapeItem{set: rangesBody(complementRanges(horizontalSpace()))}, nil
	case 'v':
		if isRange {
			return escapeItem{lit: 0x0b}, nil
		}
		return escapeItem{set: rangesBody(verticalSpace())}, nil
	case 'V':
		return escapeItem{set: rangesBody(complementRanges(verticalSpace()))}, nil
	case 'p', 'P':
		return t.property(c == 'P')
	case 'N':
		return escapeItem{}, errors.New(`named character \N{...} is not supported`)
	}
	if isASCIILetter(c) || isASCIIDigit(c) {
		if inClass {
			return escapeItem{}, fmt.Errorf(`escape \%c is not allowed in a character class (Java rejects it)`, c)
		}
		return escapeItem{}, fmt.Errorf(`unknown escape \%c (Java rejects it)`, c)
	}
	return escapeItem{lit: c}, nil // a backslash before any other character quotes it
}

// octal reads \0n, \0nn or \0mnn (m <= 3) after the "\0".
func (t *javaTranslator) octal() (escapeItem, error) {
	isOct := func(r rune) bool { return r >= '0' && r <= '7' }
	if !isOct(t.peek()) {
		return escapeItem{}, errors.New(`octal escape \0 needs an octal digit (Java rejects it)`)
	}
	n := t.next() - '0'
	if isOct(t.peek()) {
		m := t.next() - '0'
		if isOct(t.peek()) && n <= 3 {
			return escapeItem{lit: n*64 + m*8 + (t.next() - '0')}, nil
		}
		return escapeItem{lit: n*8 + m}, nil
	}
	return escapeItem{lit: n}, nil
}

// hex reads \xhh or \x{h...h} after the "\x".
func (t *javaTranslator) hex() (escapeItem, error) {
	if isHexDigit(t.peek()) && isHexDigit(t.peekAt(1)) {
		v, _ := strconv.ParseUint(string(t.src[t.pos:t.pos+2]), 16, 32)
		t.pos += 2
		return escapeItem{lit: rune(v)}, nil
	}
	if t.peek() == '{' && isHexDigit(t.peekAt(1)) {
		t.pos++
		v := rune(0)
		for isHexDigit(t.peek()) {
			d, _ := strconv.ParseUint(string(t.next()), 16, 8)
			v = v<<4 | rune(d)
			if v > utf8.MaxRune {
				return escapeItem{}, errors.New(`hexadecimal escape \x{...} is above U+10FFFF (Java rejects it)`)
			}
		}
		if t.peek() != '}' {
			return escapeItem{}, errors.New(`unclosed hexadecimal escape \x{...} (Java rejects it)`)
		}
		t.pos++
		if isSurrogate(v) {
			return escapeItem{}, fmt.Errorf(`lone surrogate \x{%X} is not supported`, v)
		}
		return escapeItem{lit: v}, nil
	}
	return escapeItem{}, errors.New(`hexadecimal escape \x needs two hex digits or {...} (Java rejects it)`)
}

// unicode reads \uhhhh after the "\u", joining a following \uhhhh low surrogate as Java does.
func (t *javaTranslator) unicode() (escapeItem, error) {
	read4 := func() (rune, bool) {
		if t.pos+4 > len(t.src) {
			return 0, false
		}
		v, err := strconv.ParseUint(string(t.src[t.pos:t.pos+4]), 16, 32)
		if err != nil {
			return 0, false
		}
		t.pos += 4
		return rune(v), true
	}
	hi, ok := read4()
	if !ok {
		return escapeItem{}, errors.New(`unicode escape \u needs four hex digits (Java rejects it)`)
	}
	if hi >= 0xd800 && hi <= 0xdbff && t.peek() == '\\' && t.peekAt(1) == 'u' {
		save := t.pos
		t.pos += 2
		if lo, ok := read4(); ok && lo >= 0xdc00 && lo <= 0xdfff {
			return escapeItem{lit: (hi-0xd800)<<10 | (lo - 0xdc00) + 0x10000}, nil
		}
		t.pos = save
	}
	if isSurrogate(hi) {
		return escapeItem{}, fmt.Errorf(`lone surrogate \u%04X is not supported`, hi)
	}
	return escapeItem{lit: hi}, nil
}

// posixClass maps Java's POSIX property names (US-ASCII, as Java defines them when
// UNICODE_CHARACTER_CLASS is off; the names are case-sensitive) to RE2's ASCII classes, which have
// the same members.
func posixClass(name string) (string, bool) {
	switch name {
	case "Lower", "Upper", "Alpha", "Digit", "Alnum", "Punct", "Graph", "Print", "Blank", "Cntrl", "Space":
		return strings.ToLower(name), true
	case "ASCII":
		return "ascii", true
	case "XDigit":
		return "xdigit", true
	}
	return "", false
}

// property reads \pX or \p{Name} after the "\p" (or "\P" when negated).
func (t *javaTranslator) property(negated bool) (escapeItem, error) {
	var name string
	switch {
	case t.eof():
		return escapeItem{}, errors.New(`\p needs a property name (Java rejects it)`)
	case t.peek() == '{':
		end := t.pos + 1
		for end < len(t.src) && t.src[end] != '}' {
			end++
		}
		if end >= len(t.src) {
			return escapeItem{}, errors.New(`unclosed property \p{... (Java rejects it)`)
		}
		name = string(t.src[t.pos+1 : end])
		t.pos = end + 1
	default:
		name = string(t.next())
	}
	class, ok := posixClass(name)
	if !ok {
		return escapeItem{}, fmt.Errorf(`property class \p{%s} is not supported (Java's and Go's Unicode tables differ; only the POSIX classes \p{Alpha}, \p{Digit}, \p{Alnum}, \p{Lower}, \p{Upper}, \p{Punct}, \p{Graph}, \p{Print}, \p{Blank}, \p{Cntrl}, \p{XDigit}, \p{Space}, \p{ASCII} are translated)`, name)
	}
	if t.flags.caseInsensitive && (class == "lower" || class == "upper") {
		class = "alpha" // Java: under CASE_INSENSITIVE, Lower and Upper match all ASCII letters
	}
	if negated {
		return escapeItem{set: "[:^" + class + ":]"}, nil
	}
	return escapeItem{set: "[:" + class + ":]"}, nil
}

// class translates a character class; the '[' is consumed. It follows Java's rules: '^' first
// negates, ']' first is a literal, a '-' between two characters makes a range (elsewhere it is
// literal), and under (?i) ASCII letters match both cases.
func (t *javaTranslator) class() error {
	var body strings.Builder
	negated := false
	if t.peek() == '^' {
		t.pos++
		negated = true
	}
	items := 0
	for {
		c := t.peek()
		switch {
		case c == -1:
			return errors.New("unclosed character class: missing ']' (Java rejects it)")
		case c == ']' && items > 0:
			t.pos++
			t.out.WriteByte('[')
			if negated {
				t.out.WriteByte('^')
			}
			t.out.WriteString(body.String())
			t.out.WriteByte(']')
			return nil
		case c == '[':
			return errors.New("nested character class (Java's class union [a[b]]) is not supported")
		case c == '&' && t.peekAt(1) == '&':
			return errors.New("character class intersection && is not supported")
		}
		items++

		lo, set, err := t.classAtom(false)
		if err != nil {
			return err
		}
		if set != "" {
			body.WriteString(set)
			continue
		}
		hi := lo
		if t.peek() == '-' && t.peekAt(1) != ']' && t.peekAt(1) != '[' && t.peekAt(1) != -1 {
			t.pos++ // the '-'
			end, endSet, err := t.classAtom(true)
			if err != nil {
				return err
			}
			if endSet != "" || end < lo {
				return errors.New("illegal character range (Java rejects it)")
			}
			hi = end
		}
		t.classRange(&body, lo, hi)
	}
}

// classAtom reads one class member: a character (set == "") or a predefined set.
func (t *javaTranslator) classAtom(rangeEnd bool) (lit rune, set string, err error) {
	c := t.next()
	if c != '\\' {
		return c, "", nil
	}
	if t.eof() {
		return 0, "", errors.New("unclosed character class: missing ']' (Java rejects it)")
	}
	if rangeEnd && (t.peek() == 'p' || t.peek() == 'P') {
		return 0, "", errors.New("illegal character range (Java rejects it)")
	}
	isRange := rangeEnd || t.peekAt(1) == '-'
	e, err := t.escapeAtom(true, isRange)
	if err != nil {
		return 0, "", err
	}
	return e.lit, e.set, nil
}

// classRange writes lo-hi into a class body, adding the other case of any ASCII letters in it under
// (?i), as Java's CIRange and BitClass do.
func (t *javaTranslator) classRange(body *strings.Builder, lo, hi rune) {
	writeClassRange(body, lo, hi)
	if !t.flags.caseInsensitive {
		return
	}
	if a, b := max(lo, 'a'), min(hi, 'z'); a <= b {
		writeClassRange(body, a-'a'+'A', b-'a'+'A')
	}
	if a, b := max(lo, 'A'), min(hi, 'Z'); a <= b {
		writeClassRange(body, a-'A'+'a', b-'A'+'a')
	}
}

func writeClassRange(b *strings.Builder, lo, hi rune) {
	writeClassRune(b, lo)
	if hi != lo {
		b.WriteByte('-')
		writeClassRune(b, hi)
	}
}

// writeClassRune writes a character inside an RE2 class: ASCII letters and digits as they are,
// everything else as \x{...}, which is never special.
func writeClassRune(b *strings.Builder, r rune) {
	if isASCIILetter(r) || isASCIIDigit(r) {
		b.WriteRune(r)
		return
	}
	fmt.Fprintf(b, `\x{%x}`, r)
}

// writeRuneEscaped writes a character outside a class so that RE2 matches exactly it.
func writeRuneEscaped(b *strings.Builder, r rune) {
	switch {
	case isASCIILetter(r) || isASCIIDigit(r) || r == '_':
		b.WriteRune(r)
	case r > 0x20 && r < 0x7f:
		b.WriteByte('\\')
		b.WriteRune(r)
	default:
		fmt.Fprintf(b, `\x{%x}`, r)
	}
}

func rangesBody(ranges [][2]rune) string {
	var b strings.Builder
	for _, r := range ranges {
		writeClassRange(&b, r[0], r[1])
	}
	return b.String()
}

// complementRanges returns the code points in 0..U+10FFFF that are not in the sorted, disjoint
// ranges.
func complementRanges(ranges [][2]rune) [][2]rune {
	var out [][2]rune
	next := rune(0)
	for _, r := range ranges {
		if r[0] > next {
			out = append(out, [2]rune{next, r[0] - 1})
		}
		next = r[1] + 1
	}
	if next <= utf8.MaxRune {
		out = append(out, [2]rune{next, utf8.MaxRune})
	}
	return out
}

func asciiCasePair(r rune) (lower, upper rune, ok bool) {
	switch {
	case r >= 'a' && r <= 'z':
		return r, r - 'a' + 'A', true
	case r >= 'A' && r <= 'Z':
		return r - 'A' + 'a', r, true
	}
	return 0, 0, false
}

func isASCIILetter(r rune) bool { return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') }
func isASCIIDigit(r rune) bool  { return r >= '0' && r <= '9' }
func isHexDigit(r rune) bool {
	return isASCIIDigit(r) || (r >= 'a' && r <= 'f') || (r >= 'A' && r <= 'F')
}
func isSurrogate(r rune) bool { return r >= 0xd800 && r <= 0xdfff }

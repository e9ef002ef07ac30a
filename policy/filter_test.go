package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFilterEmptyLists(t *testing.T) {
	tests := []struct {
		name             string
		include, exclude []string
	}{
		{"nil include (topics=\"\")", nil, nil},
		{"empty include", []string{}, []string{}},
		{"empty include, exclude set", []string{}, []string{"x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFilter(t, tc.include, tc.exclude)
			for _, name := range []string{"", "orders", "x", "heartbeats"} {
				require.False(t, f.Match(name), "name %q", name)
			}
		})
	}
	t.Run("empty exclude excludes nothing", func(t *testing.T) {
		f := newTestFilter(t, []string{".*"}, nil)
		for _, name := range []string{"orders", "__consumer_offsets", "mm2-offsets.A.internal"} {
			require.True(t, f.Match(name), "name %q", name)
			require.False(t, f.Excluded(name), "name %q", name)
		}
	})
	t.Run("nil filter", func(t *testing.T) {
		var f *Filter
		require.False(t, f.Match("orders"))
		require.False(t, f.Excluded("orders"))
	})
}

func TestFilterDefaults(t *testing.T) {
	topics := newTestFilter(t, DefaultTopicsInclude(), DefaultTopicsExclude())
	groups := newTestFilter(t, DefaultGroupsInclude(), DefaultGroupsExclude())
	props := newTestFilter(t, nil, DefaultConfigPropertiesExclude())
	tests := []struct {
		name string
		got  bool
		want bool
	}{
		{"topic __consumer_offsets", topics.Match("__consumer_offsets"), false},
		{"topic __transaction_state", topics.Match("__transaction_state"), false},
		{"topic mm2-offsets.A.internal", topics.Match("mm2-offsets.A.internal"), false},
		{"topic mm2-offset-syncs.B.internal", topics.Match("mm2-offset-syncs.B.internal"), false},
		{"topic A.checkpoints.internal", topics.Match("A.checkpoints.internal"), false},
		{"topic a-internal", topics.Match("a-internal"), false},
		{"topic x.replica", topics.Match("x.replica"), false},
		{"topic orders", topics.Match("orders"), true},
		{"topic A.orders", topics.Match("A.orders"), true},
		{"topic heartbeats", topics.Match("heartbeats"), true},
		{"topic internal (no separator before it)", topics.Match("internal"), true},
		{"topic a_internal", topics.Match("a_internal"), true},
		{"topic x.replicas (full match)", topics.Match("x.replicas"), true},
		{"topic xreplica (escaped dot)", topics.Match("xreplica"), true},
		{"topic _x (one underscore)", topics.Match("_x"), true},
		{"group console-consumer-123", groups.Match("console-consumer-123"), false},
		{"group connect-mm2", groups.Match("connect-mm2"), false},
		{"group __x", groups.Match("__x"), false},
		{"group my-group", groups.Match("my-group"), true},
		{"group connect", groups.Match("connect"), true},
		{"property min.insync.replicas", props.Excluded("min.insync.replicas"), true},
		{"property message.timestamp.type", props.Excluded("message.timestamp.type"), true},
		{"property unclean.leader.election.enable", props.Excluded("unclean.leader.election.enable"), true},
		{"property leader.replication.throttled.replicas", props.Excluded("leader.replication.throttled.replicas"), true},
		{"property retention.ms", props.Excluded("retention.ms"), false},
		{"property message.timestamp.before.max.ms (not excluded)", props.Excluded("message.timestamp.before.max.ms"), false},
		{"property minXinsyncXreplicas (escaped dots)", props.Excluded("minXinsyncXreplicas"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.got)
		})
	}
	t.Run("fresh slices", func(t *testing.T) {
		a := DefaultTopicsExclude()
		a[0] = "changed"
		require.Equal(t, `.*[\-\.]internal`, DefaultTopicsExclude()[0])
	})
}

type javaMatchCase struct {
	name    string
	include []string
	in      string
	want    bool
}

// javaMatchCases are filter results checked against java.util.regex (JDK 17 and 25) with MM2's
// semantics: Pattern.compile(String.join("|", include)).matcher(in).matches().
func javaMatchCases() []javaMatchCase {
	return []javaMatchCase{
		// Patterns commonly seen in MM2 configurations.
		{"match all", []string{".*"}, "any-topic.1", true},
		{"match all, empty name", []string{".*"}, "", true},
		{"prefix", []string{"test-topic-.*"}, "test-topic-1", true},
		{"prefix needs full match", []string{"test-topic-.*"}, "my-test-topic-1", false},
		{"literal is a full match", []string{"test"}, "test-1", false},
		{"escaped dot", []string{`primary\.test-topic-.*`}, "primary.test-topic-2", true},
		{"escaped dot is not any char", []string{`primary\.test-topic-.*`}, "primaryXtest-topic-2", false},
		{"config key prefix", []string{`delete\.retention\..*`}, "delete.retention.ms", true},
		{"config key prefix, other key", []string{`delete\.retention\..*`}, "retention.ms", false},
		{"anchored", []string{"^test-topic-.*"}, "test-topic-1", true},
		{"anchored both ends", []string{"^orders$"}, "orders", true},
		{"list", []string{"topic1", "topic2"}, "topic2", true},
		{"list, neither", []string{"topic1", "topic2"}, "topic3", false},
		{"alternation inside an item", []string{"a|b"}, "b", true},
		{"class and counted repetition", []string{"[a-z]+-[0-9]{2,3}"}, "orders-123", true},
		{"class and counted repetition, too many digits", []string{"[a-z]+-[0-9]{2,3}"}, "orders-1234", false},
		{"lazy quantifier", []string{"a.*?b"}, "axxb", true},
		{"group", []string{"(orders|payments)\\..*"}, "payments.eu", true},
		{"named group", []string{"(?<name>ord)ers"}, "orders", true},
		{"end anchor in each alternative", []string{"^a$|^b$"}, "b", true},
		{"end anchor inside a group", []string{"(foo$|bar$)"}, "bar", true},
		{"optional group with end anchor", []string{"x(y$)?"}, "x", true},
		{"repetition limit", []string{"a{1000}"}, strings.Repeat("a", 1000), true},
		// '.' excludes Java's line terminators.
		{"dot and CR", []string{"a.b"}, "a\rb", false},
		{"dot and LF", []string{"a.b"}, "a\nb", false},
		{"dot and NEL", []string{"a.b"}, "a\u0085b", false},
		{"dot and LS", []string{"a.b"}, "a\u2028b", false},
		{"dot and astral", []string{"a.b"}, "a😀b", true},
		{"dotall", []string{"(?s)a.b"}, "a\nb", true},
		{"scoped dotall", []string{"(?s:a.)b."}, "a\nbc", true},
		{"scoped dotall ends with its group", []string{"(?s:a.)b."}, "a\nb\n", false},
		// (?i) folds ASCII letters only, and its scope follows Java.
		{"case-insensitive ASCII", []string{"(?i)orders"}, "ORDERS", true},
		{"case-insensitive Kelvin sign", []string{"(?i)k"}, "\u212a", false},
		{"case-insensitive long s", []string{"(?i)s"}, "\u017f", false},
		{"case-insensitive non-ASCII", []string{"(?i)é"}, "É", false},
		{"case-insensitive class", []string{"(?i)[a-c]"}, "B", true},
		{"case-insensitive range across cases", []string{"(?i)[Z-a]"}, "z", true},
		{"case-insensitive negated class", []string{"(?i)[^a]"}, "A", false},
		{"case-insensitive quote", []string{`(?i)\QA.B\E`}, "a.b", true},
		{"case-insensitive Lower is Alpha", []string{`(?i)\p{Lower}`}, "Q", true},
		{"flags carry across list items", []string{"(?i)foo", "bar"}, "BAR", true},
		{"flags carry across alternatives", []string{"a(?i)b|c"}, "C", true},
		{"flags end with their group", []string{"(a(?i)b)c"}, "aBC", false},
		{"flags turned off", []string{"(?i)(?-i:a)"}, "A", false},
		// Classes and escapes.
		{"leading ] is literal", []string{"[]a]"}, "]", true},
		{"negated leading ] is literal", []string{"[^]a]"}, "]", false},
		{"dash after a range is literal", []string{"[a-b-c]"}, "-", true},
		{"dash after a predefined class is literal", []string{`[\d-z]`}, "-", true},
		{"quoted dash is no range", []string{`[\Qa-c\E]`}, "b", false},
		{"quoted dash is literal", []string{`[\Qa-c\E]`}, "-", true},
		{"quote without end", []string{`\Qa.b`}, "a.b", true},
		{"quote makes dot literal", []string{`\Qa.b\E.`}, "axbx", false},
		{"Java \\s has vertical tab", []string{`\s`}, "\x0b", true},
		{"negated \\s excludes vertical tab", []string{`[^\s]`}, "\x0b", false},
		{"horizontal space", []string{`\h`}, "\u00a0", true},
		{"vertical space", []string{`\v`}, "\u0085", true},
		{"\\v as a range start is VT", []string{`[\v-\x{e}]`}, "\x0c", true},
		{"\\v as a range start excludes NEL", []string{`[\v-\x{e}]`}, "\u0085", false},
		{"POSIX class", []string{`\p{Punct}+`}, "!-.", true},
		{"negated POSIX class", []string{`\P{Digit}`}, "1", false},
		{"hex escape", []string{`\x41\x{1F600}`}, "A😀", true},
		{"unicode escape pair", []string{`\uD83D\uDE00`}, "😀", true},
		{"octal escapes", []string{`\07\0101\0400`}, "\x07A 0", true},
		{"control escape", []string{`\cA\e\a`}, "\x01\x1b\x07", true},
		{"escaped non-ASCII", []string{`\é`}, "é", true},
		{"dangling ] and }", []string{"]}"}, "]}", true},
		{"empty alternative", []string{"a||b"}, "", true},
	}
}

func TestFilterJavaSemantics(t *testing.T) {
	for _, tc := range javaMatchCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := newTestFilter(t, tc.include, nil)
			require.Equal(t, tc.want, f.Match(tc.in))
		})
	}
}

func TestFilterExcludeWins(t *testing.T) {
	f := newTestFilter(t, []string{"test-topic-.*", "orders"}, []string{`test-topic-\d+\.tmp`, "(?i)ORDERS"})
	tests := []struct {
		name string
		want bool
	}{
		{"test-topic-1", true},
		{"test-topic-1.tmp", false},
		{"orders", false},
		{"test-topic-x.tmp", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, f.Match(tc.name))
		})
	}
}

func TestFilterRejectsPatterns(t *testing.T) {
	tests := []struct {
		name       string
		include    []string
		wantIndex  int
		wantSubstr string
	}{
		{"look-ahead", []string{"a(?=b)b"}, 0, `look-ahead "(?="`},
		{"negative look-ahead", []string{"(?!tmp).*"}, 0, `look-ahead "(?!"`},
		{"look-behind", []string{"x", ".*(?<=b)"}, 1, `look-behind "(?<="`},
		{"negative look-behind", []string{".*(?<!_tmp)"}, 0, `look-behind "(?<!"`},
		{"atomic group", []string{"(?>a)"}, 0, `atomic group`},
		{"back-reference", []string{`(a)\1`}, 0, `back-reference \1`},
		{"named back-reference", []string{`(?<x>a)\k<x>`}, 0, `back-reference \k<name>`},
		{"possessive star", []string{"a*+"}, 0, `possessive quantifier "*+"`},
		{"possessive plus", []string{"a++"}, 0, `possessive quantifier "++"`},
		{"possessive question", []string{"a?+"}, 0, `possessive quantifier "?+"`},
		{"possessive counted", []string{"a{2}+"}, 0, `possessive quantifier`},
		{"word boundary", []string{`\bfoo`}, 0, `word boundary \b`},
		{"Unicode category", []string{`\p{L}+`}, 0, `property class \p{L} is not supported`},
		{"java property", []string{`\p{javaLowerCase}`}, 0, `\p{javaLowerCase}`},
		{"lower-case POSIX name (Java rejects)", []string{`\p{lower}`}, 0, `\p{lower}`},
		{"class union", []string{"[a[b]]"}, 0, "nested character class"},
		{"class intersection", []string{"[a-z&&[^b]]"}, 0, "intersection &&"},
		{"multiline flag", []string{"(?m)^a$"}, 0, "multiline mode (?m)"},
		{"unicode case flag", []string{"(?iu)é"}, 0, "Unicode case folding (?u)"},
		{"comments flag", []string{"(?x)a b"}, 0, "comments mode (?x)"},
		{"unicode class flag", []string{"(?U)\\w"}, 0, "UNICODE_CHARACTER_CLASS"},
		{"unix lines flag", []string{"(?d)."}, 0, "UNIX_LINES"},
		{"end anchor before more pattern", []string{"a$\n"}, 0, `'$' or \Z followed by more pattern`},
		{"\\Z before more pattern", []string{`a\Z.`}, 0, `'$' or \Z followed by more pattern`},
		{"end anchor in a repeated group", []string{`(\n$)*`}, 0, `repeated group containing '$'`},
		{"end anchor in a group followed by more", []string{"(a$|b)c"}, 0, `'$' or \Z followed by more pattern`},
		{"repetition above RE2's limit", []string{"x{1001}"}, 0, "repetition count above 1000"},
		{"lone surrogate", []string{`\uD83D`}, 0, `lone surrogate \uD83D`},
		{"surrogate code point", []string{`\x{D800}`}, 0, `lone surrogate \x{D800}`},
		{"unclosed class", []string{"[a"}, 0, "unclosed character class"},
		{"unclosed group", []string{"(a"}, 0, "unclosed group"},
		{"unmatched paren", []string{"a)"}, 0, "unmatched ')'"},
		{"bare brace", []string{"{"}, 0, "'{' that does not start a repetition"},
		{"brace with letters", []string{"a{x}"}, 0, "'{' that does not start a repetition"},
		{"reversed repetition", []string{"a{2,1}"}, 0, "maximum below its minimum"},
		{"reversed range", []string{"[z-a]"}, 0, "illegal character range"},
		{"range to a class", []string{`[a-\d]`}, 0, "illegal character range"},
		{"unknown escape", []string{`\y`}, 0, `unknown escape \y`},
		{"\\E without \\Q", []string{`a\E`}, 0, `unknown escape \E`},
		{"trailing backslash", []string{`a\`}, 0, `trailing '\'`},
		{"bad octal", []string{`\08`}, 0, "octal escape"},
		{"bad hex", []string{`\xg1`}, 0, "hexadecimal escape"},
		{"open quote before another item", []string{`a\Q`, "b"}, 0, `\Q without \E`},
		{"duplicate group name across items", []string{"(?<n>a)", "(?<n>b)"}, 1, "named group <n> is defined twice"},
		{"dangling quantifier", []string{"*a"}, 0, "missing argument to repetition operator"},
		{"quantifier after a flag group", []string{"a(?i)*"}, 0, "after an inline flag group"},
		{"invalid UTF-8", []string{"a\xff"}, 0, "not valid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f, err := NewFilter(tc.include, nil)
			require.Nil(t, f)
			var pe *PatternError
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "include", pe.List)
			require.Equal(t, tc.wantIndex, pe.Index)
			require.Equal(t, tc.include[tc.wantIndex], pe.Pattern)
			require.ErrorContains(t, err, tc.wantSubstr)
			require.Contains(t, err.Error(), `include pattern "`)
		})
	}
}

func TestFilterReportsEveryBadPattern(t *testing.T) {
	_, err := NewFilter([]string{"ok", "a(?=b)", "[x"}, []string{"b*+"})
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want an errors.Join result")
	var got []string
	for _, e := range joined.Unwrap() {
		var pe *PatternError
		require.ErrorAs(t, e, &pe)
		got = append(got, pe.List+" "+pe.Pattern)
	}
	require.Equal(t, []string{"include a(?=b)", "include [x", "exclude b*+"}, got)
	require.Equal(t, `include pattern "a(?=b)": look-ahead "(?=" is not supported by RE2`, joined.Unwrap()[0].Error())
}

// FuzzNewFilter checks that translating arbitrary patterns never panics, that every rejection is a
// *PatternError, and that the compiled lists behave consistently: a filter whose exclude list equals
// its include list matches nothing, and an empty exclude list excludes nothing.
func FuzzNewFilter(f *testing.F) {
	for _, c := range javaMatchCases() {
		f.Add(strings.Join(c.include, "\x00"), c.in)
	}
	f.Add(`[\Qa-\E\v-\x{e}](?i:k$|\p{Lower})\Q`, "K")
	f.Fuzz(func(t *testing.T, patterns, name string) {
		list := strings.Split(patterns, "\x00")
		includeOnly, err := NewFilter(list, nil)
		if err != nil {
			var pe *PatternError
			require.ErrorAs(t, err, &pe)
			return
		}
		both, err := NewFilter(list, list)
		require.NoError(t, err)
		require.False(t, both.Match(name))
		require.Equal(t, includeOnly.Match(name), both.Excluded(name))
		require.False(t, includeOnly.Excluded(name))
	})
}

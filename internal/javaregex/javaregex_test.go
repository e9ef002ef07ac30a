package javaregex

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTranslateJavaRegex(t *testing.T) {
	tests := []struct {
		java string
		re2  string
	}{
		{`.*`, `[^\n\r\x{85}\x{2028}\x{2029}]*`},
		{`(?s).*`, `(?s:.)*`},
		{`.*[\-\.]internal`, `[^\n\r\x{85}\x{2028}\x{2029}]*[\x{2d}\x{2e}]internal`},
		{`primary\.test-topic-.*`, `primary\.test\-topic\-[^\n\r\x{85}\x{2028}\x{2029}]*`},
		{`(?i)ab1`, `[aA][bB]1`},
		{`(?i)[a-cX]`, `[a-cA-CXx]`},
		{`(?i:a)a`, `(?:[aA])a`},
		{`\s\S`, `[[:space:]][[:^space:]]`},
		{`\p{Alpha}\P{XDigit}`, `[[:alpha:]][[:^xdigit:]]`},
		{`\v`, `[\x{a}-\x{d}\x{85}\x{2028}-\x{2029}]`},
		{`[\v-\x{e}]`, `[\x{b}-\x{e}]`},
		{`\Qa.b\E+`, `a\.b+`},
		{`(?<name>x)|y$`, `(?:x)|y$`},
		{`a{2,}?\z`, `a{2,}?\z`},
		{`\Z`, `\z`},
		{`\uD83D\uDE00\x{e9}\0101\cA`, `\x{1f600}\x{e9}A\x{1}`},
	}
	for _, tc := range tests {
		t.Run(tc.java, func(t *testing.T) {
			got, openQuote, err := Translate(tc.java, nil)
			require.NoError(t, err)
			require.False(t, openQuote)
			require.Equal(t, tc.re2, got)
		})
	}
}

func TestRemoveQuoting(t *testing.T) {
	tests := []struct {
		in, want  string
		openQuote bool
	}{
		{`abc`, `abc`, false},
		{`\\Q`, `\\Q`, false},
		{`\Qa.b\E`, `a\.b`, false},
		{`\Q1.2\E3`, `\x31\.23`, false},
		{`\Qa\b\E`, `a\\b`, false},
		{`\Qé-\E\Q[\E`, `é\-\[`, false},
		{`x\Q.`, `x\.`, true},
		{`\Q\E\d`, `\d`, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, open := removeQuoting([]rune(tc.in))
			require.Equal(t, tc.want, string(got))
			require.Equal(t, tc.openQuote, open)
		})
	}
}

//! Screens a span on the raw bytes of its encoded detail, before decoding it: a
//! necessary condition for a search's free-text and `attr.` checks, cheap enough to
//! run on every span of every block a search reads (one `memmem` per wanted word or
//! pair over the span's slice, where the full check decodes the detail and splits its
//! texts into words). Postcard keeps strings as they are, so a span whose texts hold a
//! word, or whose attributes hold a string pair, holds its bytes; a span that fails the
//! screen cannot match, one that passes is checked in full when a page needs it.

use memchr::memmem::Finder;

/// Non-ASCII characters whose lowercase holds an ASCII letter or digit (CAPITAL I WITH
/// DOT ABOVE → `i̇`, KELVIN SIGN → `k`): a text holding one may hold an ASCII word
/// that its bytes, ASCII-lowercased, do not. Spans holding one are not screened.
const FOLDS_TO_ASCII: [&str; 2] = ["\u{0130}", "\u{212A}"];

/// The free-text screen: every ASCII word of the query occurs, ignoring ASCII case, in
/// the span's name or in its detail's bytes. (Words with other characters are left to
/// the full check, which folds case character by character.)
pub(crate) struct TextScreen {
    words: Vec<Finder<'static>>,
    folds: Vec<Finder<'static>>,
    name: Vec<u8>,
}

impl TextScreen {
    /// `None` when no word is ASCII (nothing to screen on). `words` are lowercase.
    pub(crate) fn new(words: &[String]) -> Option<Self> {
        let words: Vec<Finder<'static>> = words
            .iter()
            .filter(|w| w.is_ascii())
            .map(|w| Finder::new(w.as_bytes()).into_owned())
            .collect();
        (!words.is_empty()).then(|| Self {
            words,
            folds: FOLDS_TO_ASCII
                .iter()
                .map(|c| Finder::new(c.as_bytes()).into_owned())
                .collect(),
            name: Vec::new(),
        })
    }

    /// Whether the bytes (a whole block: screened once, not per span) may be
    /// screened: they hold no character that folds to ASCII.
    pub(crate) fn can_screen(&self, raw: &[u8]) -> bool {
        raw.is_ascii() || self.folds.iter().all(|f| f.find(raw).is_none())
    }

    /// Whether every word occurs in `name` or in `lowered_detail` (the detail's bytes,
    /// ASCII-lowercased, from a block `can_screen` accepted).
    pub(crate) fn may_match(&mut self, name: &str, lowered_detail: &[u8]) -> bool {
        if !self.can_screen(name.as_bytes()) {
            return true;
        }
        self.name.clear();
        self.name.extend_from_slice(name.as_bytes());
        self.name.make_ascii_lowercase();
        self.words
            .iter()
            .all(|w| w.find(&self.name).is_some() || w.find(lowered_detail).is_some())
    }
}

/// The screen of one `attr.KEY=VALUE` filter: the key and the value occur in the
/// detail's bytes. Built only for values that nothing but a string attribute shows as
/// (see `string_only`); for others every span passes.
pub(crate) struct PairScreen {
    key: Finder<'static>,
    value: Finder<'static>,
}

impl PairScreen {
    pub(crate) fn new(key: &str, value: &str) -> Option<Self> {
        string_only(value).then(|| Self {
            key: Finder::new(key.as_bytes()).into_owned(),
            value: Finder::new(value.as_bytes()).into_owned(),
        })
    }

    /// Whether the span's own attributes may hold the pair (`detail` its raw bytes).
    /// A span failing this matches only through its resource attributes.
    pub(crate) fn may_hold(&self, detail: &[u8]) -> bool {
        self.value.find(detail).is_some() && self.key.find(detail).is_some()
    }
}

/// Whether only a string attribute can show as `value` (`AttrValue::to_display_string`):
/// not empty, a boolean, a number, lowercase hex (bytes), an array or a list.
fn string_only(value: &str) -> bool {
    let hex = value.len().is_multiple_of(2)
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    !value.is_empty()
        && !hex
        && value != "true"
        && value != "false"
        && value.parse::<f64>().is_err()
        && !value.starts_with('[')
        && !value.starts_with('{')
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::AttrValue;

    #[test]
    fn the_characters_folding_to_ascii_are_all_known() {
        let found: Vec<char> = (0..=u32::from(char::MAX))
            .filter_map(char::from_u32)
            .filter(|c| !c.is_ascii())
            .filter(|c| c.to_lowercase().any(|l| l.is_ascii_alphanumeric()))
            .collect();
        let known: Vec<char> = FOLDS_TO_ASCII.iter().flat_map(|s| s.chars()).collect();
        assert_eq!(found, known);
    }

    #[test]
    fn words_are_found_in_the_name_or_the_detail_in_any_ascii_case() {
        let words = ["quarterly".to_owned(), "earn".to_owned(), "été".to_owned()];
        let mut screen = TextScreen::new(&words).unwrap();
        assert!(screen.may_match("Quarterly report", b"we earned"));
        assert!(screen.may_match("x", b"quarterly earnings"));
        assert!(!screen.may_match("Quarterly", b"nothing here"));
        // A name with a character that folds to ASCII is not screened.
        assert!(screen.may_match("\u{212A}", b""));
        assert!(screen.can_screen("plain été".as_bytes()));
        assert!(!screen.can_screen("\u{0130}stanbul".as_bytes()));
        assert!(TextScreen::new(&["été".to_owned()]).is_none());
    }

    #[test]
    fn only_values_nothing_but_a_string_shows_as_are_screened() {
        for shown_by_other_kinds in [
            AttrValue::Empty,
            AttrValue::Bool(true),
            AttrValue::Int(-42),
            AttrValue::Double(2.5),
            AttrValue::Double(f64::NAN),
            AttrValue::Double(f64::INFINITY),
            AttrValue::Bytes(vec![0xab, 0x01]),
            AttrValue::Array(vec![AttrValue::String("a".into())]),
            AttrValue::KvList(vec![]),
        ] {
            let shown = shown_by_other_kinds.to_display_string();
            assert!(PairScreen::new("k", &shown).is_none(), "{shown:?}");
        }
        let screen = PairScreen::new("gray.tag", "canary").unwrap();
        assert!(screen.may_hold(b"..gray.tag..canary.."));
        assert!(!screen.may_hold(b"..gray.tag..stable.."));
        assert!(!screen.may_hold(b"..tier..canary.."));
    }
}

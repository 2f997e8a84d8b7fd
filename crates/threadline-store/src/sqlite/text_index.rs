//! Words and queries of the full-text index (free-text search, `q=`).
//!
//! A document is a set of distinct words — of span names and texts
//! (`SpanDetail::for_each_text`) or log records — lowercased, each cut to
//! `MAX_INDEXED_CHARS`, sorted and joined by spaces, so that FTS5's `ascii` tokenizer
//! only splits a line at spaces (our words hold no ASCII separator). The tables keep no
//! content, no positions and no sizes (`content=''`, `detail=none`, `columnsize=0`):
//! they answer only which documents hold a word, and a search then checks each span
//! or record itself. How span documents are grouped and built is `text_groups`' and
//! `text_indexer`'s.
//!
//! Matching: every word of the query is a word of the span's text, the last one by
//! prefix (what is being typed). A document is a pure function of its stored rows, so
//! an erasure rebuilds the old line, deletes it with FTS5's `delete` command (with
//! `secure-delete` on, the words leave the index's pages) and inserts the line of what
//! is left.

use std::borrow::Cow;
use std::cell::RefCell;
use std::sync::Arc;

use rusqlite::{params, Connection};
use threadline_model::{SpanDetail, SpanRecord};

use crate::sqlite::codec;

/// Indexed words are cut to this many characters (a query word too, so a prefix
/// still finds its block).
const MAX_INDEXED_CHARS: usize = 32;

/// For each byte: its lowercase form if it is an ASCII letter or digit, else 0.
static LOWER_WORD: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] = c.to_ascii_lowercase();
        }
        b += 1;
    }
    t
};

/// The words of a text — runs of alphanumeric characters — lowercased (character by
/// character). ASCII is scanned byte by byte; a word already in lowercase ASCII is
/// borrowed.
fn words(text: &str) -> Words<'_> {
    Words { text, at: 0 }
}

struct Words<'a> {
    text: &'a str,
    at: usize,
}

impl Words<'_> {
    /// The character at `self.at` (a char boundary, before the end), whether it is
    /// part of a word, and its length.
    fn class(&self) -> (bool, bool, usize) {
        let b = self.text.as_bytes()[self.at];
        if b.is_ascii() {
            return (b.is_ascii_alphanumeric(), b.is_ascii_uppercase(), 1);
        }
        match self.text[self.at..].chars().next() {
            Some(c) => (c.is_alphanumeric(), true, c.len_utf8()),
            None => (false, false, 1),
        }
    }
}

impl<'a> Iterator for Words<'a> {
    type Item = Cow<'a, str>;

    fn next(&mut self) -> Option<Cow<'a, str>> {
        let len = self.text.len();
        while self.at < len {
            let (in_word, _, n) = self.class();
            if in_word {
                break;
            }
            self.at += n;
        }
        if self.at >= len {
            return None;
        }
        let start = self.at;
        // `fold`: an upper-case ASCII letter or any non-ASCII character was seen.
        let mut fold = false;
        while self.at < len {
            let (in_word, needs_fold, n) = self.class();
            if !in_word {
                break;
            }
            fold |= needs_fold;
            self.at += n;
        }
        let word = &self.text[start..self.at];
        Some(if !fold {
            Cow::Borrowed(word)
        } else if word.is_ascii() {
            Cow::Owned(word.to_ascii_lowercase())
        } else {
            Cow::Owned(word.chars().flat_map(char::to_lowercase).collect())
        })
    }
}

/// Where a word as the index holds it ends: after `MAX_INDEXED_CHARS` characters.
fn indexed_len(word: &str) -> usize {
    if word.len() <= MAX_INDEXED_CHARS {
        return word.len();
    }
    word.char_indices()
        .nth(MAX_INDEXED_CHARS)
        .map_or(word.len(), |(at, _)| at)
}

/// A word as the index holds it.
fn indexed(word: &str) -> &str {
    &word[..indexed_len(word)]
}

/// Texts are split into chunks of about this many bytes (cut at an ASCII separator, so
/// no word is split), and each chunk's words are kept per thread: the texts LLM traffic
/// carries repeat — system prompts, tool definitions, retrieved passages, the history a
/// chat sends again each turn — and a repeated chunk is not scanned again.
const CHUNK_BYTES: usize = 512;

/// Chunks a thread keeps the words of (it starts over when full).
const CACHED_CHUNKS: usize = 2048;

/// Texts shorter than this are scanned without the cache.
const CACHE_MIN_BYTES: usize = 64;

/// The distinct words of one chunk of text: lowercase ASCII words of up to 8 bytes
/// packed into `u64`s (most words), the others as strings, cut to `MAX_INDEXED_CHARS`.
#[derive(Default)]
struct ChunkWords {
    short: Vec<u64>,
    long: Vec<Arc<str>>,
}

thread_local! {
    static CHUNK_CACHE: RefCell<foldhash::HashMap<Box<str>, Arc<ChunkWords>>> =
        RefCell::new(foldhash::HashMap::default());
}

/// The chunks of a text: each ends at the first ASCII separator at or after
/// `CHUNK_BYTES` from its start (or at the text's end).
fn chunks(text: &str) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    std::iter::from_fn(move || {
        if start >= bytes.len() {
            return None;
        }
        let from = (start + CHUNK_BYTES).min(bytes.len());
        let end = bytes[from..]
            .iter()
            .position(|b| b.is_ascii() && !b.is_ascii_alphanumeric())
            .map_or(bytes.len(), |at| from + at + 1);
        let chunk = &text[start..end];
        start = end;
        Some(chunk)
    })
}

impl ChunkWords {
    /// The words of `chunk` (through the thread's cache when it is long enough).
    fn of(chunk: &str) -> Arc<ChunkWords> {
        if chunk.len() < CACHE_MIN_BYTES {
            return Arc::new(Self::scan(chunk));
        }
        CHUNK_CACHE.with(|cache| {
            let mut cache = cache.borrow_mut();
            if let Some(words) = cache.get(chunk) {
                return Arc::clone(words);
            }
            let words = Arc::new(Self::scan(chunk));
            if cache.len() >= CACHED_CHUNKS {
                cache.clear();
            }
            cache.insert(chunk.into(), Arc::clone(&words));
            words
        })
    }

    /// Scans a chunk, with the boundaries and case folding of `words`.
    fn scan(text: &str) -> Self {
        let mut out = Self::default();
        let bytes = text.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b.is_ascii() {
                if !b.is_ascii_alphanumeric() {
                    i += 1;
                    continue;
                }
                // An ASCII run: packed while short.
                let start = i;
                let mut packed = 0u64;
                while let Some(&b) = bytes.get(i) {
                    let lower = LOWER_WORD[usize::from(b)];
                    if lower == 0 {
                        break;
                    }
                    if i - start < 8 {
                        packed |= u64::from(lower) << (8 * (i - start));
                    }
                    i += 1;
                }
                if bytes.get(i).is_some_and(|b| !b.is_ascii()) {
                    // The word goes on with non-ASCII characters, or ends at one.
                    i = out.add_general(text, start);
                } else if i - start <= 8 {
                    out.short.push(packed);
                } else {
                    let word = &text[start..start + (i - start).min(MAX_INDEXED_CHARS)];
                    out.long.push(word.to_ascii_lowercase().into());
                }
            } else {
                i = out.add_general(text, i);
            }
        }
        out.short.sort_unstable();
        out.short.dedup();
        out.long.sort_unstable();
        out.long.dedup();
        out
    }

    /// Adds the word starting at `start` (if a word starts there) the general way;
    /// returns where scanning goes on.
    fn add_general(&mut self, text: &str, start: usize) -> usize {
        let Some(c) = text[start..].chars().next() else {
            return text.len();
        };
        if !c.is_alphanumeric() {
            return start + c.len_utf8();
        }
        let mut scan = words(&text[start..]);
        let Some(word) = scan.next() else {
            return text.len();
        };
        let end = start + scan.at;
        let word = indexed(&word);
        if word.len() <= 8 && word.is_ascii() {
            let mut packed = 0u64;
            for (k, b) in word.bytes().enumerate() {
                packed |= u64::from(b) << (8 * k);
            }
            self.short.push(packed);
        } else {
            self.long.push(word.into());
        }
        end
    }
}

/// The searchable texts of a block's spans (each name, then `SpanDetail::for_each_text`),
/// copied into one buffer as ingest encodes the block: what the full-text indexer is
/// handed, without the spans' many allocations.
#[derive(Default)]
pub(crate) struct BlockTexts {
    joined: String,
    /// Where each text ends in `joined`.
    ends: Vec<usize>,
}

impl BlockTexts {
    pub(crate) fn of_spans(spans: &[SpanRecord]) -> Self {
        // Found first, then copied into a buffer of their size: growing it as they
        // came copied the block's texts over again at each doubling.
        let mut found: Vec<&str> = Vec::with_capacity(spans.len() * 4);
        for span in spans {
            found.push(&span.name);
            span.detail.for_each_text(|text| found.push(text));
        }
        let mut texts = Self {
            joined: String::with_capacity(found.iter().map(|t| t.len()).sum()),
            ends: Vec::with_capacity(found.len()),
        };
        for text in found {
            texts.push(text);
        }
        texts
    }

    fn push(&mut self, text: &str) {
        self.joined.push_str(text);
        self.ends.push(self.joined.len());
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, end)| &self.joined[start..*end])
    }

    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.joined.len() + 8 * self.ends.len()
    }
}

/// The distinct words of a document's spans or records (a group of span blocks, a log
/// block), over every prompt and reply. A text seen before in the document is skipped
/// whole; the others are taken chunk by chunk (`ChunkWords`).
#[derive(Default)]
pub(crate) struct BlockWords<'a> {
    short: foldhash::HashSet<u64>,
    long: foldhash::HashSet<Arc<str>>,
    texts: foldhash::HashSet<&'a str>,
    /// Chunks already taken, held so that their addresses stay theirs.
    chunks: foldhash::HashMap<*const ChunkWords, Arc<ChunkWords>>,
}

impl<'a> BlockWords<'a> {
    /// The words of a decoded span (the indexer reads them borrowed, `add_texts`).
    #[cfg(test)]
    pub(crate) fn add_span(&mut self, name: &'a str, detail: &'a SpanDetail) {
        self.add_text(name);
        detail.for_each_text(|text| self.add_text(text));
    }

    /// The words of a span as the indexer reads it: its name and detail texts.
    pub(crate) fn add_texts(&mut self, name: &'a str, texts: &codec::DetailTexts<'a>) {
        self.add_text(name);
        texts.for_each_text(|text| self.add_text(text));
    }

    /// Adds the words of `text`.
    pub(crate) fn add_text(&mut self, text: &'a str) {
        if !self.texts.insert(text) {
            return;
        }
        for chunk in chunks(text) {
            let words = ChunkWords::of(chunk);
            if self.chunks.contains_key(&Arc::as_ptr(&words)) {
                continue;
            }
            self.short.extend(words.short.iter().copied());
            self.long.extend(words.long.iter().cloned());
            self.chunks.insert(Arc::as_ptr(&words), words);
        }
    }

    /// The block's FTS document: its words sorted (so that it is a function of the
    /// block alone), joined by spaces ("" when none). No word is allocated.
    pub(crate) fn document(self) -> String {
        let short: Vec<[u8; 8]> = self.short.iter().map(|p| p.to_le_bytes()).collect();
        let mut words: Vec<&[u8]> = self.long.iter().map(|w| w.as_bytes()).collect();
        words.extend(short.iter().map(|b| {
            let len = b.iter().position(|c| *c == 0).unwrap_or(8);
            &b[..len]
        }));
        words.sort_unstable();
        let mut doc = Vec::with_capacity(words.iter().map(|w| w.len() + 1).sum());
        for (i, w) in words.iter().enumerate() {
            if i > 0 {
                doc.push(b' ');
            }
            doc.extend_from_slice(w);
        }
        // Every word is a whole UTF-8 string or ASCII, so the join is too.
        String::from_utf8(doc).unwrap_or_default()
    }
}

/// A free-text query: its words, the last matched by prefix, and its phrases — words
/// that must follow one another in one text: a quoted run (`"charged twice"`) or a
/// token that punctuation splits into words (`user-40`: `user` then `40`, not each
/// anywhere). A phrase's last word is whole unless the query ends with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TextQuery {
    words: Vec<String>,
    /// Index ranges into `words`, of two words or more.
    phrases: Vec<std::ops::Range<usize>>,
}

impl TextQuery {
    /// `None` when the text holds no word (only punctuation or spaces).
    pub(crate) fn parse(text: &str) -> Option<Self> {
        let mut words: Vec<String> = Vec::new();
        let mut phrases = Vec::new();
        let mut push = |piece: &str, words: &mut Vec<String>| {
            let start = words.len();
            words.extend(self::words(piece).map(Cow::into_owned));
            if words.len() - start > 1 {
                phrases.push(start..words.len());
            }
        };
        // Outside quotes, each whitespace-separated token; inside, the quoted run.
        for (i, part) in text.split('"').enumerate() {
            if i % 2 == 1 {
                push(part, &mut words);
            } else {
                for token in part.split_whitespace() {
                    push(token, &mut words);
                }
            }
        }
        (!words.is_empty()).then_some(Self { words, phrases })
    }

    /// The query's words, lowercase.
    pub(crate) fn words(&self) -> &[String] {
        &self.words
    }

    /// The FTS5 expression finding the blocks that may hold a match.
    pub(crate) fn fts_expression(&self) -> String {
        let last = self.words.len() - 1;
        let mut terms: Vec<String> = Vec::new();
        for (i, word) in self.words.iter().enumerate() {
            let cut = indexed(word);
            // A word longer than the index keeps is matched by its indexed beginning.
            let prefix = i == last || cut.len() < word.len();
            let term = format!("\"{cut}\"{}", if prefix { "*" } else { "" });
            if !terms.contains(&term) {
                terms.push(term);
            }
        }
        terms.join(" AND ")
    }

    /// Whether a span's name and texts hold every word.
    pub(crate) fn matches(&self, name: &str, detail: &SpanDetail) -> bool {
        self.matches_texts(|f| {
            f(name);
            detail.for_each_text(f);
        })
    }

    /// Whether the texts `feed` hands over hold every word, and each phrase within
    /// one text.
    pub(crate) fn matches_texts<'t>(&self, feed: impl FnOnce(&mut dyn FnMut(&'t str))) -> bool {
        let last = self.words.len() - 1;
        let word_matches = |i: usize, w: &str| {
            self.words[i] == w || (i == last && w.starts_with(self.words[i].as_str()))
        };
        let mut found = vec![false; self.words.len()];
        let mut phrase_found = vec![false; self.phrases.len()];
        let mut left = self.words.len() + self.phrases.len();
        feed(&mut |text| {
            if left == 0 {
                return;
            }
            let mut seen: Vec<Cow<'t, str>> = Vec::new();
            for w in words(text) {
                for (i, done) in found.iter_mut().enumerate() {
                    if !*done && word_matches(i, &w) {
                        *done = true;
                        left -= 1;
                    }
                }
                if !self.phrases.is_empty() {
                    seen.push(w);
                }
            }
            for (p, range) in self.phrases.iter().enumerate() {
                if phrase_found[p] || seen.len() < range.len() {
                    continue;
                }
                let hit = seen.windows(range.len()).any(|window| {
                    window
                        .iter()
                        .zip(range.clone())
                        .all(|(w, i)| word_matches(i, w))
                });
                if hit {
                    phrase_found[p] = true;
                    left -= 1;
                }
            }
        });
        left == 0
    }
}

/// Adds a block's document to the full-text table `table` (`log_text`; `text_groups`
/// by group).
pub(crate) fn insert_into(
    conn: &Connection,
    table: &str,
    block_id: i64,
    document: &str,
) -> rusqlite::Result<()> {
    if !document.is_empty() {
        conn.prepare_cached(&format!(
            "INSERT INTO {table} (rowid, terms) VALUES (?1, ?2)"
        ))?
        .execute(params![block_id, document])?;
    }
    Ok(())
}

/// Swaps a document `before` (the one inserted) for `after`.
pub(crate) fn replace_document(
    conn: &Connection,
    table: &str,
    rowid: i64,
    before: &str,
    after: &str,
) -> rusqlite::Result<()> {
    if before == after {
        return Ok(());
    }
    if !before.is_empty() {
        conn.prepare_cached(&format!(
            "INSERT INTO {table} ({table}, rowid, terms) VALUES ('delete', ?1, ?2)"
        ))?
        .execute(params![rowid, before])?;
    }
    insert_into(conn, table, rowid, after)
}

#[cfg(test)]
mod tests {
    use super::*;
    use threadline_model::{AttrValue, Attribute};

    fn detail(prompt: &str) -> SpanDetail {
        SpanDetail {
            attributes: vec![Attribute::new(
                "gen_ai.prompt.0.content",
                AttrValue::String(prompt.into()),
            )],
            ..SpanDetail::default()
        }
    }

    #[test]
    fn a_block_document_is_its_distinct_lowercased_words_sorted() {
        let a = detail("Why is the Sky blue? The sky… ÉTÉ");
        let b = detail("x".repeat(40).as_str());
        let mut words = BlockWords::default();
        words.add_span("chat gpt-4o", &a);
        words.add_span("chat", &b);
        let expected = format!("4o blue chat gpt is sky the why {} été", "x".repeat(32));
        assert_eq!(words.document(), expected);
    }

    #[test]
    fn words_are_runs_of_alphanumerics_lowercased() {
        let reference = |t: &str| -> Vec<String> {
            t.split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(|w| w.chars().flat_map(char::to_lowercase).collect())
                .collect()
        };
        for text in [
            "",
            "  ",
            "Hello, World! gpt-4o_mini 3.14",
            "Ünïcödé ΣΟΦΙΑ straße 東京タワー 123abc",
            "{\"role\":\"user\",\"content\":\"Why?\"}",
            "tab\tnew\nline—dash…end",
        ] {
            let got: Vec<String> = words(text).map(Cow::into_owned).collect();
            assert_eq!(got, reference(text), "{text:?}");
        }
        assert!(matches!(
            words("already lower").next(),
            Some(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn a_block_document_holds_the_words_the_query_side_finds() {
        let texts = [
            "Hello, World! gpt-4o_mini 3.14 abcdefgh abcdefghi",
            "Ünïcödé ΣΟΦΙΑ straße 東京タワー 123abc MiXeD…end",
            "{\"role\":\"user\",\"content\":\"Why?\"}",
            &"long".repeat(20),
            // Many chunks, some words longer than a chunk, some not ASCII.
            &"Quarterly ÉARNINGS grew 12%; see the annex. ".repeat(80),
            &format!("{} tail", "x".repeat(3 * CHUNK_BYTES)),
            &"東京タワー ".repeat(300),
        ];
        let details: Vec<SpanDetail> = texts.iter().map(|t| detail(t)).collect();
        let mut block = BlockWords::default();
        let mut expected: Vec<String> = Vec::new();
        for d in &details {
            block.add_span("", d);
            d.for_each_text(|t| expected.extend(words(t).map(|w| indexed(&w).to_owned())));
        }
        expected.sort_unstable();
        expected.dedup();
        assert_eq!(block.document(), expected.join(" "));
        // Again, with every chunk's words from the thread's cache.
        let mut again = BlockWords::default();
        for d in &details {
            again.add_span("", d);
        }
        assert_eq!(again.document(), expected.join(" "));
    }

    #[test]
    fn every_word_must_match_the_last_by_prefix() {
        let d = detail("The retriever timed out after 30 s");
        let q = |t: &str| TextQuery::parse(t).unwrap().matches("search_docs", &d);
        assert!(q("retriever"));
        assert!(q("TIMED retr"));
        assert!(q("search_docs time"));
        assert!(!q("retr timed"), "only the last word is a prefix");
        assert!(!q("retriever missing"));
        assert!(TextQuery::parse(" ?! ").is_none());
        assert_eq!(
            TextQuery::parse("timed retr").unwrap().fts_expression(),
            "\"timed\" AND \"retr\"*"
        );
        let long = "y".repeat(40);
        assert_eq!(
            TextQuery::parse(&format!("{long} z"))
                .unwrap()
                .fts_expression(),
            format!("\"{}\"* AND \"z\"*", "y".repeat(32))
        );
    }

    #[test]
    fn hyphenated_tokens_and_quoted_runs_are_phrases() {
        let d = detail("user-40 asked about order 77; user 7 then 41 and 40 items");
        let q = |t: &str| TextQuery::parse(t).unwrap().matches("chat", &d);
        assert!(q("user-40"));
        assert!(q("\"asked about order\""));
        assert!(q("user-4"), "the query's last word, in a phrase, by prefix");
        assert!(
            !q("user-41"),
            "user and 41 each occur, not one after the other"
        );
        assert!(!q("\"about asked\""));
        assert!(q("about asked"), "unquoted words match anywhere");
        // Words of a phrase must follow one another within one text.
        let split = SpanDetail {
            events: vec![],
            ..detail("ends with user")
        };
        assert!(!TextQuery::parse("user-40")
            .unwrap()
            .matches("40 starts", &split));
    }
}

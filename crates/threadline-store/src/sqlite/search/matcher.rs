//! Matching spans on what SQL cannot see: the attribute pairs and free text, screened
//! on each block's raw bytes as it is read, then checked in full.

use super::*;

/// Checks what SQL cannot, on a span's detail: `attr.KEY=VALUE` filters (against span
/// then resource attributes) and free text (against its name and texts). Two steps: a
/// screen on the raw bytes of each span as its block is read (`span_screen`: each
/// block is opened once, in order), and the full check of a screened span when it
/// comes out newest first (few: a page's worth and the rare span the screen let by).
pub(super) struct SpanMatcher<'q> {
    wanted: &'q [(String, String)],
    /// The screens of the wanted pairs (`None` for a value other kinds show as).
    pair_screens: Vec<Option<PairScreen>>,
    /// The free text and the blocks the full-text index says may hold it.
    text: Option<(TextQuery, BlockSet)>,
    text_screen: Option<TextScreen>,
    /// The block whose rows are being screened.
    screening: Option<ScreenedBlock>,
    origins: OriginCache,
    blocks: BlockCache,
}

/// A block as the screens read it.
struct ScreenedBlock {
    block_id: i64,
    raw: Arc<Vec<u8>>,
    /// The block ASCII-lowercased, for the text screen; `None` when it holds a
    /// character that folds to ASCII (or there is no text screen).
    lowered: Option<Vec<u8>>,
}

/// What the screen says of a span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Screened {
    /// It cannot match.
    Out,
    /// It may: check it in full.
    Check,
    /// It matches (its name holds every word and no pair is wanted).
    Matches,
}

impl<'q> SpanMatcher<'q> {
    pub(super) fn new(
        conn: &Connection,
        tenant_id: i64,
        wanted: &'q [(String, String)],
        text: Option<TextQuery>,
    ) -> Result<Self, StoreError> {
        let text_screen = text.as_ref().and_then(|q| TextScreen::new(q.words()));
        let text = match text {
            Some(query) => {
                let blocks = text_groups::candidate_blocks(&query, conn)?;
                Some((query, blocks))
            }
            None => None,
        };
        Ok(Self {
            wanted,
            pair_screens: wanted.iter().map(|(k, v)| PairScreen::new(k, v)).collect(),
            text,
            text_screen,
            screening: None,
            origins: OriginCache::new(tenant_id),
            blocks: BlockCache::default(),
        })
    }

    fn filters_detail(&self) -> bool {
        !self.wanted.is_empty() || self.text.is_some()
    }

    /// Whether the block may hold a matching span, per the full-text index (its
    /// attribute filter is tested by the read that walks the blocks, `RowFilter`).
    pub(super) fn block_may_match(&self, block_id: i64) -> bool {
        self.text
            .as_ref()
            .is_none_or(|(_, blocks)| blocks.may_match(block_id))
    }

    /// The screen of a span of this name, detail and origin.
    pub(super) fn screen(
        &mut self,
        conn: &Connection,
        slot: DetailSlot,
        origin_hash: i64,
        name: Option<&str>,
    ) -> Result<Screened, StoreError> {
        if !self.filters_detail() {
            return Ok(Screened::Matches);
        }
        let name = name.unwrap_or_default();
        if let Some((query, _)) = &self.text {
            if self.wanted.is_empty() && query.matches_texts(|f| f(name)) {
                return Ok(Screened::Matches);
            }
        }
        if self.screening.as_ref().map(|b| b.block_id) != Some(slot.block_id()) {
            let raw = self.blocks.open(conn, slot.block_id())?;
            let lowered = match (&self.text_screen, self.screening.take()) {
                (Some(screen), reuse) if screen.can_screen(&raw) => {
                    let mut lowered = reuse.and_then(|b| b.lowered).unwrap_or_default();
                    lowered.clear();
                    lowered.extend_from_slice(&raw);
                    lowered.make_ascii_lowercase();
                    Some(lowered)
                }
                _ => None,
            };
            self.screening = Some(ScreenedBlock {
                block_id: slot.block_id(),
                raw,
                lowered,
            });
        }
        let Some(block) = &self.screening else {
            return Ok(Screened::Check);
        };
        let range = slot.range();
        let Some(raw) = block.raw.get(range.clone()) else {
            return Ok(Screened::Check); // the full check reports the corrupt slot
        };
        if let (Some(screen), Some(lowered)) = (&mut self.text_screen, &block.lowered) {
            if !screen.may_match(name, &lowered[range]) {
                return Ok(Screened::Out);
            }
        }
        for ((key, value), screen) in self.wanted.iter().zip(&self.pair_screens) {
            let Some(screen) = screen else { continue };
            if screen.may_hold(raw) {
                continue;
            }
            // Not among the span's own attributes: only its resource can hold it.
            let origin = self.origins.get(conn, origin_hash)?;
            if origin
                .resource_attr(key)
                .is_none_or(|v| v.to_display_string() != *value)
            {
                return Ok(Screened::Out);
            }
        }
        Ok(Screened::Check)
    }

    /// Whether the span of this name, detail and origin passes (`name` is read only
    /// for free text).
    pub(super) fn matches(
        &mut self,
        conn: &Connection,
        slot: DetailSlot,
        origin_hash: i64,
        name: Option<&str>,
    ) -> Result<bool, StoreError> {
        if !self.filters_detail() {
            return Ok(true);
        }
        let (detail, _) = self.blocks.detail(conn, slot)?;
        if let Some((query, _)) = &self.text {
            if !query.matches(name.unwrap_or_default(), &detail) {
                return Ok(false);
            }
        }
        if self.wanted.is_empty() {
            return Ok(true);
        }
        let origin = self.origins.get(conn, origin_hash)?;
        Ok(self.wanted.iter().all(|(key, value)| {
            let found = detail.attr(key).or_else(|| origin.resource_attr(key));
            found.is_some_and(|v| v.to_display_string() == *value)
        }))
    }
}

/// The wanted pairs as the blocks' attribute filters hash them; none when some value
/// is too long to be in a filter (every block is then read).
pub(super) fn filter_hashes(wanted: &[(String, String)]) -> Vec<u64> {
    if wanted
        .iter()
        .any(|(_, v)| v.len() > crate::sqlite::attr_filter::MAX_INDEXED_VALUE)
    {
        return Vec::new();
    }
    wanted
        .iter()
        .map(|(k, v)| crate::sqlite::attr_filter::pair_hash(k, v))
        .collect()
}

//! The hybrid final ranking of stage 2: `reranker x w1 + stage 1 x w2 + recency x w3` over the
//! reranked candidates ([`FinalBlend`], config `search.final_blend`).

use serde::{Deserialize, Serialize};

use crate::{Document, Error, Hit, Result};

/// The weights of the hybrid final ranking, and where a document's date is.
///
/// Each term is normalized to `[0, 1]` over the candidates the reranker scored, so that scores
/// on different scales can be added:
/// - reranker and stage 1: min-max, `(x - min) / (max - min)` (all 1 when every candidate has
///   the same score);
/// - recency: linear in days between the oldest and the newest dated candidate, the newest 1
///   and the oldest 0 (all 1 when they share one date). A document's date is its `date_field`
///   metadata, `YYYY-MM-DD` (a longer ISO 8601 timestamp is read by its first ten characters).
///   A document without a (readable) date is ranked on the other two terms alone, their
///   weights rescaled to the same total, so it is neither rewarded nor punished for its age.
///
/// The defaults are the knowledge-base plan's `0.6 x reranker + 0.3 x stage 1 + 0.1 x recency`
/// over the `date` metadata, so in a config `search: {final_blend: {}}` is the plan.
///
/// ```
/// use rerank::pipeline::FinalBlend;
/// let blend = FinalBlend::default();
/// assert_eq!((blend.reranker, blend.stage1, blend.recency), (0.6, 0.3, 0.1));
/// assert_eq!(blend.date_field, "date");
/// blend.validate()?;
/// assert!(FinalBlend { recency: -1.0, ..FinalBlend::default() }.validate().is_err());
/// # Ok::<(), rerank::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinalBlend {
    /// The weight of the reranker's score (default 0.6).
    pub reranker: f32,
    /// The weight of the stage-1 score (default 0.3).
    pub stage1: f32,
    /// The weight of recency (default 0.1).
    pub recency: f32,
    /// The metadata field holding a document's date (default `date`).
    pub date_field: String,
}

impl Default for FinalBlend {
    fn default() -> Self {
        FinalBlend {
            reranker: 0.6,
            stage1: 0.3,
            recency: 0.1,
            date_field: "date".into(),
        }
    }
}

impl FinalBlend {
    /// Checks the weights: finite, not negative, not all zero; the date field is named.
    pub fn validate(&self) -> Result<()> {
        let weights = [self.reranker, self.stage1, self.recency];
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().sum::<f32>() <= 0.0
        {
            return Err(Error::Config(format!(
                "search.final_blend: the weights must be finite, at least 0 and not all 0, got \
                 reranker {}, stage1 {}, recency {}",
                self.reranker, self.stage1, self.recency
            )));
        }
        if self.date_field.trim().is_empty() {
            return Err(Error::Config(
                "search.final_blend.date_field must name a metadata field".into(),
            ));
        }
        Ok(())
    }

    /// Sets each hit's `score` to the blend of its `rerank_score`, `stage1_score` and recency
    /// (see the type's docs); the hits keep their order (the caller sorts).
    pub fn apply(&self, hits: &mut [Hit]) {
        let rerank: Vec<f32> = hits
            .iter()
            .map(|h| h.rerank_score.filter(|s| s.is_finite()).unwrap_or(f32::NAN))
            .collect();
        let stage1: Vec<f32> = hits.iter().map(|h| h.stage1_score).collect();
        let days: Vec<Option<i64>> = hits
            .iter()
            .map(|h| document_day(&h.document, &self.date_field))
            .collect();
        let rerank = min_max(&rerank);
        let stage1 = min_max(&stage1);
        let (oldest, newest) = days
            .iter()
            .flatten()
            .fold((i64::MAX, i64::MIN), |(lo, hi), &d| (lo.min(d), hi.max(d)));
        let total = self.reranker + self.stage1 + self.recency;
        for (i, h) in hits.iter_mut().enumerate() {
            let base = self.reranker * rerank[i] + self.stage1 * stage1[i];
            h.score = match days[i] {
                Some(d) => {
                    let recency = if newest > oldest {
                        (d - oldest) as f32 / (newest - oldest) as f32
                    } else {
                        1.0
                    };
                    base + self.recency * recency
                }
                None if self.reranker + self.stage1 > 0.0 => {
                    base * total / (self.reranker + self.stage1)
                }
                None => 0.0,
            };
        }
    }
}

/// `xs` min-max normalized to `[0, 1]`; a non-finite value becomes 0, and all become 1 when the
/// finite ones are equal.
fn min_max(xs: &[f32]) -> Vec<f32> {
    let finite = xs.iter().copied().filter(|x| x.is_finite());
    let (lo, hi) = finite.fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    xs.iter()
        .map(|&x| {
            if !x.is_finite() {
                0.0
            } else if hi > lo {
                (x - lo) / (hi - lo)
            } else {
                1.0
            }
        })
        .collect()
}

/// The day number (days since 1970-01-01) of `doc`'s `field` metadata, when it is a
/// `YYYY-MM-DD` date (or starts with one).
pub(super) fn document_day(doc: &Document, field: &str) -> Option<i64> {
    let text = doc.metadata.get(field)?.as_str()?;
    parse_day(text)
}

/// Days since 1970-01-01 of a `YYYY-MM-DD` date (the first ten characters of `text`).
fn parse_day(text: &str) -> Option<i64> {
    let date = text.get(..10)?;
    let mut parts = date.split('-');
    let (y, m, d) = (parts.next()?, parts.next()?, parts.next()?);
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return None;
    }
    let (y, m, d): (i64, i64, i64) = (y.parse().ok()?, m.parse().ok()?, d.parse().ok()?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&m) || d < 1 || d > month_days[(m - 1) as usize] {
        return None;
    }
    // Howard Hinnant's days_from_civil.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn hit(id: &str, rerank: f32, stage1: f32, date: Option<&str>) -> Hit {
        let mut doc = Document::new(id, "text");
        if let Some(d) = date {
            doc.metadata.insert("date".into(), serde_json::json!(d));
        }
        let mut h = Hit::new(Arc::new(doc), stage1);
        h.stage1_score = stage1;
        h.rerank_score = Some(rerank);
        h
    }

    #[test]
    fn days_are_counted_from_the_epoch_and_bad_dates_refused() {
        assert_eq!(parse_day("1970-01-01"), Some(0));
        assert_eq!(parse_day("2000-03-01"), Some(11_017));
        assert_eq!(parse_day("2024-02-29T10:00:00Z"), Some(19_782));
        assert_eq!(parse_day("2023-02-29"), None);
        assert_eq!(parse_day("yesterday"), None);
        assert_eq!(parse_day("2024-1-5"), None);
    }

    #[test]
    fn the_blend_is_the_weighted_sum_of_normalized_terms() {
        let mut hits = vec![
            hit("a", 4.0, 10.0, Some("2024-01-01")),
            hit("b", 2.0, 20.0, Some("2024-01-11")),
            hit("c", 0.0, 15.0, Some("2024-01-06")),
            hit("d", 2.0, 10.0, None),
        ];
        FinalBlend::default().apply(&mut hits);
        let score = |id: &str| hits.iter().find(|h| h.id() == id).unwrap().score;
        // a: reranker 1, stage 1 0, the oldest date 0.
        assert!((score("a") - 0.6).abs() < 1e-6);
        // b: reranker 0.5, stage 1 1, the newest date 1.
        assert!((score("b") - (0.3 + 0.3 + 0.1)).abs() < 1e-6);
        // c: reranker 0, stage 1 0.5, half-way in time.
        assert!((score("c") - (0.15 + 0.05)).abs() < 1e-6);
        // d: no date: reranker 0.5 and stage 1 0, rescaled from 0.9 to 1.0.
        assert!((score("d") - 0.3 / 0.9).abs() < 1e-6);
        // Recency alone orders by date.
        let mut hits = vec![
            hit("old", 1.0, 1.0, Some("2020-05-01")),
            hit("new", 1.0, 1.0, Some("2024-05-01")),
        ];
        let newest_first = FinalBlend {
            reranker: 0.0,
            stage1: 0.0,
            recency: 1.0,
            ..FinalBlend::default()
        };
        newest_first.apply(&mut hits);
        assert_eq!((hits[0].score, hits[1].score), (0.0, 1.0));
    }
}

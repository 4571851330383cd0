//! The review queue read a page at a time (issue 50): a queue larger than a page on both
//! databases, its counts from SQL, the offered order read by keyset as the domain's `next_for`
//! gives it, and the queue page's and the API's links between pages.
use bakeoff::domain::Timestamp;
use bakeoff::domain::candidate::CandidateSpec;
use bakeoff::domain::evalset::EvalSetFile;
use bakeoff::domain::review::{
    ItemStatus, LabelBody, NewReviewItem, Progress, QueuePlace, Reason, ReviewItem, Verdict, next_for,
};
use bakeoff::domain::run::{NewRun, RunConfig};
use bakeoff::store::DynStore;

use crate::support::app::{TINY_EVALSET, spawn_app_on};
use crate::support::db::{TestStore, each_backend};

/// Items in the test queue: two pages of 50 and a part page.
const ITEMS: usize = 120;

/// A run of one candidate with `ITEMS` queued answers (cases q1…q120); returns (run, item ids).
async fn big_queue(s: &DynStore) -> (i64, Vec<i64>) {
    let version = s
        .save_evalset_version(&EvalSetFile::parse("tiny.jsonl", TINY_EVALSET).unwrap())
        .await
        .unwrap();
    let a = s
        .create_candidate(&crate::support::checked::admin_new(&CandidateSpec::openai_chat(
            "a",
            "http://127.0.0.1:9/v1",
            "a",
        )))
        .await
        .unwrap();
    let run = s
        .create_run(&NewRun {
            name: "big queue".into(),
            evalset_version_id: version,
            candidate_ids: vec![a],
            config: RunConfig::default(),
        })
        .await
        .unwrap();
    let items: Vec<NewReviewItem> = (1..=ITEMS)
        .map(|i| NewReviewItem {
            run_id: run,
            candidate_id: a,
            case_id: format!("q{i}"),
            repetition: 0,
            reasons: vec![Reason::Manual],
            detail: String::new(),
            added_by: "test".into(),
        })
        .collect();
    assert_eq!(
        s.add_review_items(&items, Timestamp::now()).await.unwrap(),
        ITEMS as u64
    );
    let ids = s
        .list_review_items_page(Some(run), 0, ITEMS as i64)
        .await
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    (run, ids)
}

fn label(verdict: Verdict) -> LabelBody {
    LabelBody {
        verdict,
        score: None,
        corrected_expected: None,
        note: String::new(),
    }
}

/// Every item offered to `who`, read `page` at a time by keyset.
async fn offered_by_pages(s: &DynStore, run: i64, who: &str, page: i64) -> Vec<i64> {
    let mut ids = Vec::new();
    let mut after: Option<QueuePlace> = None;
    loop {
        let got = s.offered_review_items(Some(run), who, after, page).await.unwrap();
        let Some(last) = got.last() else { break };
        after = Some(QueuePlace::of(last));
        ids.extend(got.iter().map(|i| i.id));
        assert!(ids.len() <= ITEMS, "the keyset never repeats an item");
    }
    ids
}

each_backend!(a_queue_larger_than_a_page_is_read_a_page_at_a_time);
async fn a_queue_larger_than_a_page_is_read_a_page_at_a_time(t: TestStore) {
    let s = &t.store;
    let (run, ids) = big_queue(s).await;
    assert_eq!(ids.len(), ITEMS);
    // A mixed queue: labelled (one with two labellers who disagree), claimed by ana and by bob,
    // skipped, assigned to bob.
    for &id in &ids[0..10] {
        s.save_review_label(id, "ana", &label(Verdict::Pass), Timestamp::now())
            .await
            .unwrap();
    }
    s.save_review_label(ids[3], "bob", &label(Verdict::Fail), Timestamp::now())
        .await
        .unwrap();
    assert!(s.claim_review_item(ids[20], "ana").await.unwrap());
    assert!(s.claim_review_item(ids[21], "bob").await.unwrap());
    for id in [ids[15], ids[60], ids[100]] {
        assert!(s.skip_review_item(id, "ana").await.unwrap());
    }
    assert!(s.assign_review_item(ids[70], Some("bob")).await.unwrap());

    // Counts from SQL equal the counts over the whole queue.
    let whole: Vec<ReviewItem> = s.list_review_items_page(Some(run), 0, 1_000).await.unwrap();
    let labels = s.list_review_labels(Some(run)).await.unwrap();
    let progress = s.review_progress(Some(run)).await.unwrap();
    assert_eq!(progress, Progress::of(&whole, &labels), "{}", t.backend);
    assert_eq!(
        (
            progress.total,
            progress.labelled,
            progress.claimed,
            progress.skipped,
            progress.disagreements
        ),
        (120, 10, 2, 3, 1)
    );
    assert_eq!(s.review_progress(None).await.unwrap().total, 120);

    // Pages by offset: 50, 50, 20, then none; ids ascending, no overlap.
    let mut paged = Vec::new();
    for (offset, expect) in [(0, 50), (50, 50), (100, 20), (120, 0)] {
        let page = s.list_review_items_page(Some(run), offset, 50).await.unwrap();
        assert_eq!(page.len(), expect, "offset {offset} on {}", t.backend);
        paged.extend(page.iter().map(|i| i.id));
    }
    assert_eq!(paged, ids);
    // A page's labels only.
    let between = s.list_review_labels_between(Some(run), ids[0], ids[4]).await.unwrap();
    assert_eq!(between.len(), 6, "five items labelled by ana, one by bob too");
    assert!(between.iter().all(|l| l.item_id <= ids[4]));

    // The offered order, read 7 at a time by keyset, is the domain's order for each labeller.
    for who in ["ana", "bob", "carl"] {
        let mut expected = Vec::new();
        let mut after = None;
        while let Some(next) = next_for(&whole, who, after) {
            expected.push(next.id);
            after = Some(next.id);
        }
        assert_eq!(
            offered_by_pages(s, run, who, 7).await,
            expected,
            "{who} on {}",
            t.backend
        );
    }
    let ana = offered_by_pages(s, run, "ana", 50).await;
    assert_eq!(
        ana.len(),
        120 - 10 - 1 - 1,
        "not labelled, not bob's claim, not assigned to bob"
    );
    assert_eq!(&ana[ana.len() - 3..], &[ids[15], ids[60], ids[100]], "skipped last");
    assert_eq!(ana[0], ids[10]);
    // After a skipped item, the rest of the skipped ones; after an open one, the open ones first.
    let after_skip = s
        .offered_review_items(
            Some(run),
            "ana",
            Some(QueuePlace {
                skipped: true,
                id: ids[15],
            }),
            5,
        )
        .await
        .unwrap();
    assert_eq!(after_skip.iter().map(|i| i.id).collect::<Vec<_>>(), [ids[60], ids[100]]);
    let whole_status = |id: i64| whole.iter().find(|i| i.id == id).unwrap().status;
    assert_eq!(whole_status(ids[15]), ItemStatus::Skipped);
}

each_backend!(queue_pages_and_the_api_link_page_to_page);
async fn queue_pages_and_the_api_link_page_to_page(t: TestStore) {
    let app = spawn_app_on(t).await;
    let (run, ids) = big_queue(&app.store).await;

    let (page, _) = app.page(&format!("/runs/{run}/review")).await;
    assert_eq!(page.count("tr[data-item]"), 50);
    assert_eq!(
        page.attr("tbody tr[data-item]:first-child", "data-item"),
        Some(ids[0].to_string())
    );
    assert_eq!(
        page.attr("nav.pager a[rel=next]", "href").as_deref(),
        Some(format!("/runs/{run}/review?page=2").as_str())
    );
    assert!(
        page.text("#progress").contains("of 120 labelled"),
        "counts of the whole queue"
    );
    assert_eq!(
        page.attr("#start-labelling", "href"),
        Some(format!("/review/items/{}?run={run}", ids[0]))
    );
    let (last, _) = app.page(&format!("/runs/{run}/review?page=3")).await;
    assert_eq!(last.count("tr[data-item]"), 20);
    assert_eq!(
        last.attr("tbody tr[data-item]:first-child", "data-item"),
        Some(ids[100].to_string())
    );
    assert_eq!(last.count("nav.pager a[rel=next]"), 0);
    assert_eq!(
        last.attr("nav.pager a[rel=prev]", "href").as_deref(),
        Some(format!("/runs/{run}/review?page=2").as_str())
    );
    assert_eq!(
        app.get(&format!("/runs/{run}/review?page=4")).await.status().as_u16(),
        404
    );
    assert_eq!(
        app.get(&format!("/runs/{run}/review?page=zero"))
            .await
            .status()
            .as_u16(),
        400
    );
    let (every, _) = app.page("/review?page=2").await;
    assert_eq!(every.count("tr[data-item]"), 50);

    let api: serde_json::Value = app
        .get(&format!("/api/v1/runs/{run}/review?per_page=50&page=3"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(api["items"].as_array().unwrap().len(), 20, "{api}");
    assert_eq!(api["progress"]["total"], 120);
    assert_eq!((api["page"].clone(), api["pages"].clone()), (3.into(), 3.into()));
    assert!(api["next"].is_null());
    assert_eq!(api["previous"], format!("/api/v1/runs/{run}/review?page=2&per_page=50"));
    let first: serde_json::Value = app
        .get(&format!("/api/v1/runs/{run}/review"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(first["items"].as_array().unwrap().len(), 100, "100 a page by default");
    assert_eq!(first["next"], format!("/api/v1/runs/{run}/review?page=2&per_page=100"));

    // Skipping the first item from its page leads to the next open one, not to the end.
    let r = app
        .client
        .post(app.url(&format!("/review/items/{}/skip", ids[0])))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("scope={run}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 303);
    assert_eq!(
        r.headers()["location"].to_str().unwrap(),
        format!("/review/items/{}?run={run}", ids[1])
    );
    // The API's offered list after an item reads from its place on.
    let offered: serde_json::Value = app
        .get(&format!("/api/v1/review/items?run={run}&after={}&limit=3", ids[1]))
        .await
        .json()
        .await
        .unwrap();
    let offered: Vec<i64> = offered
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["item"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(offered, [ids[2], ids[3], ids[4]]);
}

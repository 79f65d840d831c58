//! Reading a listing page after page: `page(token)` fetches the page after `token`
//! (empty for the first) and gives its items and its `next_page_token`; the listing
//! ends at an empty token.

/// More pages than any test lists: a listing that never ends fails the test.
const MAX_PAGES: usize = 10_000;

/// Every item of every page, in order.
pub async fn collect_pages<T, I>(mut page: impl AsyncFnMut(String) -> (I, String)) -> Vec<T>
where
    I: IntoIterator<Item = T>,
{
    let all: Result<Vec<T>, std::convert::Infallible> =
        try_collect_pages(async |token| Ok(page(token).await)).await;
    let Ok(all) = all;
    all
}

/// As [`collect_pages`], stopping at the first page that fails.
pub async fn try_collect_pages<T, I, E>(
    mut page: impl AsyncFnMut(String) -> Result<(I, String), E>,
) -> Result<Vec<T>, E>
where
    I: IntoIterator<Item = T>,
{
    let (mut all, mut token) = (Vec::new(), String::new());
    for _ in 0..MAX_PAGES {
        let (items, next) = page(token).await?;
        all.extend(items);
        if next.is_empty() {
            return Ok(all);
        }
        token = next;
    }
    panic!("a listing of more than {MAX_PAGES} pages: its next_page_token never ends");
}

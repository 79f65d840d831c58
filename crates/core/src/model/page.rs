//! Keyset paging: a store is asked for one row more than the page holds, so that the
//! page knows whether another follows without a count.

/// Cuts `rows` (read with a limit of `limit + 1`) to `limit` and returns the token of
/// the next page, made by `token` from the page's last row, or empty on the last page.
pub fn cut<T>(rows: &mut Vec<T>, limit: usize, token: impl FnOnce(&T) -> String) -> String {
    if rows.len() <= limit || limit == 0 {
        return String::new();
    }
    rows.truncate(limit);
    token(&rows[limit - 1])
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn one_row_more_than_the_page_means_another_page() {
        let mut rows = vec![1, 2, 3];
        assert_eq!(cut(&mut rows, 2, |last| last.to_string()), "2");
        assert_eq!(rows, [1, 2]);
        let mut rows = vec![1, 2];
        assert_eq!(cut(&mut rows, 2, |last| last.to_string()), "");
        assert_eq!(rows, [1, 2]);
    }
}

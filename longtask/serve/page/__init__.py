"""The web page of ``longtask serve``: a list of threads, and one thread's live view.

Plain HTML with inline CSS and a little vanilla JavaScript: no build step and nothing loaded
from elsewhere. The stylesheet (``page.css``), the scripts (``common.js``, ``index.js``,
``thread.js``, ``effect_card.js``) and the icon (``favicon.svg``) are files in this package;
``_html`` builds the pages around them.
"""

from longtask.serve.page._html import FAVICON, index_page, thread_page

__all__ = ["FAVICON", "index_page", "thread_page"]

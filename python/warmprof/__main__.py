from .cli import end, main

end(main())

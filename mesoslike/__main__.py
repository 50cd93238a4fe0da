from mesoslike.cli import main

main()

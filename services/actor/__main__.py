from services.actor.main import main

main()
